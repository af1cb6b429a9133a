"""The command line: parsers, printing, progress and exit codes, on top of the machinery."""
