# etcd, the real server, built from etcd's own Go module at the version
# Quire's go.mod pins (internal/cmd/etcd), on an empty base.
FROM scratch
ARG VERSION=dev
ARG COMMIT=unknown
ARG ETCD_VERSION=unknown
LABEL org.opencontainers.image.title="quire-etcd" \
      org.opencontainers.image.description="etcd ${ETCD_VERSION}, built from its Go module for Quire" \
      org.opencontainers.image.version="${ETCD_VERSION}" \
      org.opencontainers.image.revision="${COMMIT}" \
      dev.quire.build.version="${VERSION}"
COPY ca-certificates.crt /etc/ssl/certs/ca-certificates.crt
COPY --chown=65532:65532 empty/ /var/lib/etcd/
COPY --chown=65532:65532 empty/ /tmp/
COPY etcd /etcd
COPY quire /quire
USER 65532:65532
ENV ETCD_DATA_DIR=/var/lib/etcd
EXPOSE 2379 2380
# etcd's own /health: ok while it has a leader and answers reads.
HEALTHCHECK --interval=5s --timeout=3s --start-period=10s CMD ["/quire", "health", "http://127.0.0.1:2379/health"]
ENTRYPOINT ["/etcd"]
