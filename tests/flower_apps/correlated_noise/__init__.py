"""correlated_noise: a Message-API app whose fleet cannot be sampled, given DP-FTRL / banded-MF / BLT noise."""
