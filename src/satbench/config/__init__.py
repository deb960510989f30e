"""What the user asks for and every bound on it: the run and lane schema (`schema`), what a runtime
kind and a load profile mean (`runtime`, `profiles`), the text of list flags (`flagtext`) and the
limits on what satbench reads from a server or a file (`limits`). Imports only `errors`."""
