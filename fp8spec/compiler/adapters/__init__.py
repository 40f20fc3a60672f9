"""Backend adapters: each turns spec fields into settings of one layer of the stack, reading backend profiles."""
