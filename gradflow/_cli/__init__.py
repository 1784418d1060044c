"""The command line: one module per subcommand (`register`, `run`)."""
