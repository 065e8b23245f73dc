"""Expert parallelism: experts per rank, all-to-all bytes, routing over nodes."""
