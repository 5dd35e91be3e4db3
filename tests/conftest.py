import os

import torch

# Two shared cores: torch with 2 threads can slow down many-fold under contention.
torch.set_num_threads(int(os.environ.get("SCD_TEST_THREADS", "1")))
