# An S3-compatible fragment store for clusters without a cloud's: the
# SeaweedFS server (weed), built statically from its Go module by
# .ci/build-weed, on an empty base.
FROM scratch
ARG VERSION=dev
ARG COMMIT=unknown
ARG WEED_VERSION=unknown
LABEL org.opencontainers.image.title="quire-s3" \
      org.opencontainers.image.description="SeaweedFS ${WEED_VERSION} (S3-compatible), for Quire's fragment stores" \
      org.opencontainers.image.version="${WEED_VERSION}" \
      org.opencontainers.image.revision="${COMMIT}" \
      dev.quire.build.version="${VERSION}"
COPY ca-certificates.crt /etc/ssl/certs/ca-certificates.crt
COPY --chown=65532:65532 empty/ /data/
COPY --chown=65532:65532 empty/ /tmp/
COPY weed /weed
COPY quire /quire
USER 65532:65532
EXPOSE 8333
ENTRYPOINT ["/weed"]
CMD ["server", "-dir=/data", "-s3", "-s3.port=8333", "-ip.bind=0.0.0.0"]
