"""The foundations: argument checks, error messages, files, records, progress bars, random draws. They import nothing else of gradflow."""
