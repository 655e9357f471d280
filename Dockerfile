# One image for every role (engine, exporter, healthcheck, node, CLI): `vigil <command>`.
#   docker build -t ghcr.io/vigil-gpu/vigil:0.1.0 .
#   docker push ghcr.io/vigil-gpu/vigil:0.1.0
# The build stage uses the project's own install-deps (Debian 12 packages only); the runtime
# stage has only the shared libraries the binary links. NVML is not in the image: the NVIDIA
# container runtime mounts the driver's libnvidia-ml.so.1 into the engine's container.

FROM debian:12 AS build
RUN apt-get update -qq && apt-get install -y -qq --no-install-recommends sudo ca-certificates \
    && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY scripts/install-deps scripts/install-deps
RUN scripts/install-deps && rm -rf /var/lib/apt/lists/*
COPY . .
RUN cmake -S . -B /build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DVIGIL_BUILD_TESTS=OFF \
      -DVIGIL_BUILD_BENCH=OFF \
    && cmake --build /build --target vigil \
    && strip --strip-debug /build/vigil

FROM debian:12-slim
RUN apt-get update -qq && apt-get install -y -qq --no-install-recommends \
      libgrpc++1.51 libgrpc29 libprotobuf32 libspdlog1.10 libfmt9 libyaml-cpp0.7 \
      libcpp-httplib0.11 libssl3 libc-ares2 libre2-9 zlib1g libbrotli1 \
    && rm -rf /var/lib/apt/lists/*
COPY --from=build /build/vigil /usr/bin/vigil
COPY deploy/config/engine.yaml /etc/vigil/engine.yaml
COPY scenarios /usr/share/vigil/scenarios
ENTRYPOINT ["/usr/bin/vigil"]
CMD ["--help"]
