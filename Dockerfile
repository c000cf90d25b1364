# The hami-py image used by deploy/ (hami-control, hami-node) and the examples/ workloads.
#   docker build -t ghcr.io/hami-py/hami-py:0.1.0 .
# The C libraries (libvgpu.so; the simulated driver) are built by `pip install .` with the
# image's gcc; nothing needs the CUDA toolkit. At run time the NVIDIA container runtime mounts
# the real libcuda.so.1 / libnvidia-ml.so.1 into GPU containers.
FROM python:3.11-slim AS build
RUN apt-get update && apt-get install -y --no-install-recommends gcc make libc6-dev \
    && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY . .
RUN pip install --no-cache-dir --prefix=/install -c constraints.txt .

FROM python:3.11-slim
RUN apt-get update && apt-get install -y --no-install-recommends openssl \
    && rm -rf /var/lib/apt/lists/*
COPY --from=build /install /usr/local
# No USER here: hami-node must write kubelet's device-plugin folder (root); the hami-control
# Deployment runs as 65532 through its securityContext.
ENTRYPOINT []
CMD ["hami-control", "--help"]
