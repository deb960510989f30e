"""The command line: argument and lane-file parsing (`args`, `lanefile`) and the commands (`main`)."""
