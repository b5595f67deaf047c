# sluice, built from this repository. Used by docker-compose.yml.
FROM rust:1-bookworm AS build
WORKDIR /src
COPY Cargo.toml Cargo.lock ./
COPY src src
COPY benches benches
RUN cargo build --release --locked --bin sluice

FROM debian:bookworm-slim
RUN apt-get update && apt-get install -y --no-install-recommends ca-certificates \
    && rm -rf /var/lib/apt/lists/* && useradd --system --uid 10001 sluice
COPY --from=build /src/target/release/sluice /usr/local/bin/sluice
COPY descriptors /etc/sluice/descriptors
USER sluice
# In a container the listeners must face the container network; publish the
# admin port only where you need it.
ENV SLUICE_CONFIG=/etc/sluice/descriptors \
    SLUICE_GRPC_ADDR=0.0.0.0:8081 \
    SLUICE_ADMIN_ADDR=0.0.0.0:8080 \
    SLUICE_LOG_FORMAT=json
EXPOSE 8081 8080
ENTRYPOINT ["sluice"]
CMD ["serve"]
