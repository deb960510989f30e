"""A fleet: the same lanes measured on every node of a Ray cluster (`run`, `node_task`), and the
per-node capability reports merged into one router configuration (`merge`, `export`)."""
