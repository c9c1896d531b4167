"""The pure core of dra-gpu: data types and decisions, no I/O, no third-party adapters."""
