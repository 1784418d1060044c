"""In-context regression with linear attention: the problem (`problem`) and its
closed forms (`theory`)."""
