"""One run, orchestrated: lanes, levels, repetitions and scenarios (`sweep`), one lane's server and
clients (`lane_session`), what the run will do (`plan`), --resume (`resume`), the checks before a
server starts (`preflight`) and the fairness workloads (`fairness`). It hands what it recorded to a
derivation it is given (satbench.pipeline) and imports nothing of the deriving side."""
