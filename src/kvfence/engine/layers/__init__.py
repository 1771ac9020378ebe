"""Building blocks of the model runner: rotary embedding (``rotary``; which length a token is rotated
for where RoPE depends on it, torch-free for the scheduler: ``rope_lengths``; YaRN's scalar
parameters, torch-free for both runtimes: ``yarn``), paged attention, window masks, sampling, penalties."""
