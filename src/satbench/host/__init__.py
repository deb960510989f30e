"""The machine satbench runs on: CPU, memory and OS (`hardware`), and its GPUs through NVML (`gpu`)."""
