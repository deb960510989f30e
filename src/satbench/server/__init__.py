"""The llama.cpp server under test: how satbench starts or reaches one (embedded, native, remote),
what it says about itself (`probe`), what its logs say about memory (`memlog`) and whether a run
still fits it (`checks`)."""
