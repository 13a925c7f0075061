# The stream-sum example, packaged as users package a consumer
# application: its own static binary (consumer.Main), nothing else.
FROM scratch
ARG VERSION=dev
ARG COMMIT=unknown
LABEL org.opencontainers.image.title="quire-streamsum" \
      org.opencontainers.image.description="Quire's stream-sum example consumer application, which checks exactly-once processing" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${COMMIT}"
COPY ca-certificates.crt /etc/ssl/certs/ca-certificates.crt
COPY --chown=65532:65532 empty/ /var/lib/quire/
COPY --chown=65532:65532 empty/ /tmp/
COPY streamsum /streamsum
# quire health, for the health check: the application binary has none.
COPY quire /quire
USER 65532:65532
ENV QUIRE_CONSUMER_DIR=/var/lib/quire/consumer QUIRE_LISTEN=0.0.0.0:7702 QUIRE_ADMIN=0.0.0.0:7704
EXPOSE 7702 7704
HEALTHCHECK --interval=5s --timeout=3s --start-period=10s CMD ["/quire", "health"]
ENTRYPOINT ["/streamsum"]
CMD ["serve"]
