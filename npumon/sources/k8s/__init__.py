"""The Kubernetes pod attribution source: which pod and container hold each chip, from the kubelet's
pod-resources API (v1 `List`, and `GetAllocatableResources` where the kubelet serves it).

config.py (the `kubernetes:` section), devices.py (Ascend device-plugin ids -> chips, pure), client.py (one
bounded gRPC exchange over the unix socket; grpcio is imported only there, lazily), cgroup.py (a process's
container from /proc/<pid>/cgroup, pure), annotations.py and apiserver.py (the device plugin's pod annotations,
which name the chips Volcano mounted, from the API server), source.py (the source, its metric families and check --json keys).

podresources_v1.proto is the kubelet's proto (its header says where from); podresources_v1_pb2.py and
podresources_v1_pb2_grpc.py are generated from it and checked in. They are generated with grpcio-tools 1.62.3
(protobuf 4.25 gencode, which carries no runtime version check) so that they load with every grpcio and
protobuf the `npumon[k8s]` extra allows, down to the last ones for Python 3.9. To regenerate, from this folder:

    python3 -m venv /tmp/k8s-gen && /tmp/k8s-gen/bin/pip install grpcio-tools==1.62.3
    /tmp/k8s-gen/bin/python -m grpc_tools.protoc -I. --python_out=. --grpc_python_out=. podresources_v1.proto
    sed -i 's/^import podresources_v1_pb2 as/from . import podresources_v1_pb2 as/' podresources_v1_pb2_grpc.py
"""
