"""SGD on the flow's time axis, for any problem that samples, and its comparison with the flow."""
