"""Building blocks of the model runner: rotary embedding, paged attention, sampling."""
