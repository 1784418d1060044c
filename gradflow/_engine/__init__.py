"""The engine: any population loss (a `gf.Problem`) solved as a gradient flow, swept, checkpointed, saved. It imports no problem."""
