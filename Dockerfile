# hami-scheduler container. The build stage runs the same install and build scripts as the README.
# BINARY picks where the binary comes from: `build` (the default, for release) compiles it here; `prebuilt`
# takes a stripped hami-scheduler from the context's prebuilt/ folder (scripts/build-image.sh --prebuilt: the
# binary the README's test command built, so the image adds seconds, not a second compile).
FROM debian:12 AS build
ARG BINARY=build
WORKDIR /src
COPY scripts/install-deps.sh scripts/check-toolchains.sh scripts/
RUN if [ "$BINARY" = build ]; then ./scripts/install-deps.sh --build-only \
      && ./scripts/check-toolchains.sh --build-only && rm -rf /var/lib/apt/lists/*; fi
COPY . .
RUN if [ "$BINARY" = build ]; then \
      BUILD_DIR=/build BUILD_TYPE=Release ./scripts/build.sh -DHAMI_BUILD_TESTS=OFF -DHAMI_BUILD_BENCH=OFF \
      && strip /build/hami-scheduler; \
    else install -D -m 0755 prebuilt/hami-scheduler /build/hami-scheduler; fi

FROM debian:12-slim
COPY --from=build /build/hami-scheduler /usr/local/bin/hami-scheduler
# Runtime libraries of the binary (the -dev packages of the build stage, without headers). HAMi's chart runs
# the image as `scheduler --http_bind=0.0.0.0:443 ...`: `scheduler` is a copy of the binary carrying the file
# capability CAP_NET_BIND_SERVICE, so the non-root user binds 443. Only that copy has it: a pod dropping every
# capability cannot exec a binary that has one, and `hami-scheduler` (deploy/, ports >= 1024) must start there.
RUN apt-get update -qq \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
      libboost-json1.81.0 libyaml-cpp0.7 libfmt9 libspdlog1.10 libssl3 ca-certificates tzdata \
      libcap2-bin \
 && cp /usr/local/bin/hami-scheduler /usr/local/bin/scheduler \
 && setcap cap_net_bind_service=+ep /usr/local/bin/scheduler \
 && apt-get purge -y -qq libcap2-bin && apt-get autoremove -y -qq && apt-get clean \
 && rm -rf /var/lib/apt/lists/* /var/cache/apt/*.bin /var/log/apt /var/log/dpkg.log
# The handshake stamps use the process time zone; HAMi's containers run in UTC.
ENV TZ=UTC
USER 65532:65532
# 8080: /filter, /bind, /webhook, /healthz, /readyz (--http_bind; HAMi's chart: 443 with TLS); 8443: the
# webhook when it has a listener of its own (--webhook-bind, deploy/); 9395: /metrics (--metrics-bind-address).
EXPOSE 8080 8443 443 9395
ENTRYPOINT ["/usr/local/bin/hami-scheduler"]
# In a pod the API server comes from the service account; deploy/ passes the extender's flags.
CMD ["serve", "--http_bind=0.0.0.0:8080"]
