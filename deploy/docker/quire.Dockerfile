# The quire image: brokers (quire broker serve) and the CLI, one static
# binary on an empty base. Built by deploy/images, which stages the binary,
# CA certificates and the directories below in the build context.
FROM scratch
ARG VERSION=dev
ARG COMMIT=unknown
LABEL org.opencontainers.image.title="quire" \
      org.opencontainers.image.description="Quire brokers and CLI" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${COMMIT}"
COPY ca-certificates.crt /etc/ssl/certs/ca-certificates.crt
# Writable by the image's user: spools (a volume in production) and /tmp.
COPY --chown=65532:65532 empty/ /var/lib/quire/
COPY --chown=65532:65532 empty/ /tmp/
COPY quire /quire
USER 65532:65532
ENV QUIRE_DIR=/var/lib/quire/spools
# Brokers listen on every interface in a container; peers and clients reach
# them at the container's hostname (see --advertise).
ENV QUIRE_LISTEN=0.0.0.0:7700 QUIRE_ADMIN=0.0.0.0:7704
EXPOSE 7700 7704
HEALTHCHECK --interval=5s --timeout=3s --start-period=10s CMD ["/quire", "health"]
ENTRYPOINT ["/quire"]
CMD ["broker", "serve"]
