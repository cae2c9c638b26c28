# PyTorch (included by the main Makefile): Debian 12's python3-torch and python3-torchvision, what
# examples/pytorch/train.py and its test (examples/pytorch/train_test.go) run with.

.PHONY: torch-deps

## torch-deps: the Debian packages of the PyTorch tests (python3-torch, python3-torchvision, python3-pil,
## python3-boto3), apt-get only when missing.
torch-deps:
	bash scripts/torch-deps.sh
