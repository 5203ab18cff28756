"""The paper's measurements that the tests learn policies from (pure Python, no torch)."""

# Figure 2 of the paper: JS divergence between decoder layers on WMT14 En-De.
PAPER_SELF = [
    [0, 0.5429, 0.5138, 0.4650, 0.5005, 0.5531],
    [0.5429, 0, 0.0606, 0.0630, 0.0703, 0.0332],
    [0.5138, 0.0606, 0, 0.0671, 0.0472, 0.0296],
    [0.4650, 0.0630, 0.0671, 0, 0.0176, 0.0552],
    [0.5005, 0.0703, 0.0472, 0.0176, 0, 0.0389],
    [0.5531, 0.0332, 0.0296, 0.0552, 0.0389, 0],
]
PAPER_ENCDEC = [
    [0, 0.0175, 0.2239, 0.3933, 0.7986, 0.3603],
    [0.0175, 0, 0.1442, 0.3029, 0.7295, 0.3324],
    [0.2239, 0.1442, 0, 0.0971, 0.6270, 0.4163],
    [0.3933, 0.3029, 0.0971, 0, 0.2385, 0.2022],
    [0.7986, 0.7295, 0.6270, 0.2385, 0, 0.0658],
    [0.3603, 0.3324, 0.4163, 0.2022, 0.0658, 0],
]
# The attention analysis of a model whose decoder attends as the paper's Figure 2 shows.
PAPER_JS = {"decoder_self": PAPER_SELF, "decoder_encdec": PAPER_ENCDEC, "encoder_self": None}
