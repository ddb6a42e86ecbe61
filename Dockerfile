# hami-scheduler container. The build stage runs the same install and build scripts as the README.
FROM debian:12 AS build
WORKDIR /src
COPY scripts/install-deps.sh scripts/install-deps.sh
RUN ./scripts/install-deps.sh --build-only && rm -rf /var/lib/apt/lists/*
COPY . .
RUN BUILD_DIR=/build BUILD_TYPE=Release ./scripts/build.sh -DHAMI_BUILD_TESTS=OFF -DHAMI_BUILD_BENCH=OFF \
 && strip /build/hami-scheduler

FROM debian:12-slim
# Runtime libraries of the binary (the -dev packages of the build stage, without headers).
RUN apt-get update -qq \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
      libboost-json1.81.0 libboost-container1.81.0 libyaml-cpp0.7 libfmt9 libspdlog1.10 libssl3 ca-certificates tzdata \
 && rm -rf /var/lib/apt/lists/*
COPY --from=build /build/hami-scheduler /usr/local/bin/hami-scheduler
# The handshake stamps use the process time zone; HAMi's containers run in UTC.
ENV TZ=UTC
USER 65532:65532
# 8080: /filter, /bind, /healthz, /readyz (--http_bind); 9395: /metrics (--metrics-bind-address).
EXPOSE 8080 9395
ENTRYPOINT ["/usr/local/bin/hami-scheduler"]
# In a pod the API server comes from the service account; deploy/ passes the extender's flags.
CMD ["serve", "--http_bind=0.0.0.0:8080"]
