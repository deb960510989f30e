"""What the user asks for and every bound on it: the run and lane schema (`schema`) and the
limits on what satbench reads from a server or a file (`limits`). Imports only `errors`."""
