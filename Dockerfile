# npumon's container image for the Kubernetes DaemonSet (deploy/kubernetes/, docs/kubernetes.md).
# npu-smi, hccn_tool, the driver's libraries and libdcmi.so are not in the image: they come from the host's
# driver through the DaemonSet's read-only mounts, so the image fits every driver version, as Huawei's do.
#   docker build -t npumon:latest .
FROM python:3.12-slim-bookworm

LABEL org.opencontainers.image.title="npumon" \
      org.opencontainers.image.description="Monitoring and health-check daemon for Huawei Ascend NPU hosts" \
      org.opencontainers.image.licenses="Apache-2.0"

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_NO_CACHE_DIR=1

COPY setup.cfg pyproject.toml README.md /src/
COPY npumon /src/npumon
# The k8s extra: grpcio and protobuf for the kubelet's pod-resources socket.
RUN pip install --no-cache-dir "/src[k8s]" && rm -rf /src

WORKDIR /var/lib/npumon
EXPOSE 9842
# uid 0 without capabilities beyond what the pod grants, as the systemd unit runs it: npu-smi and DCMI decide
# "root" by the effective uid and print root-only values (firmware version, I2C health checks) only then.
# hadolint ignore=DL3002
USER 0:0
ENTRYPOINT ["npumon"]
CMD ["run", "--config", "/etc/npumon/npumon.yaml"]
