"""The run directory as a store: its file names (`layout`), the one safe reader and atomic writer
(`rundir`), run.json (`manifest`), the raw events and samples (`events`) and versioned JSON artifacts
(`artifacts`). The measuring side writes these records; the deriving side reads them."""
