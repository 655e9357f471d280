# One image for every role (engine, exporter, healthcheck, node, CLI): `vigil <command>`.
#   docker build -t ghcr.io/vigil-gpu/vigil:0.1.0 .
#   docker push ghcr.io/vigil-gpu/vigil:0.1.0
# The build stage uses the project's own install-deps (Debian 12 packages only) and packages the
# build as the .deb (`make package`); the runtime stage installs that .deb on debian:12-slim, so
# apt pulls exactly the runtime libraries its Depends (from dpkg-shlibdeps) name. NVML is not in
# the image: the NVIDIA container runtime mounts the driver's libnvidia-ml.so.1 into the engine's
# container.

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
    && cd /build && cpack -G DEB

FROM debian:12-slim
COPY --from=build /build/vigil_*.deb /tmp/
RUN apt-get update -qq && apt-get install -y -qq --no-install-recommends /tmp/vigil_*.deb \
    && rm -rf /var/lib/apt/lists/* /tmp/vigil_*.deb
ENTRYPOINT ["/usr/bin/vigil"]
CMD ["--help"]
