# sluice, built from this repository: the image docker-compose.yml runs and a
# platform team ships. The run stage is `scratch` plus the binary, the four
# C libraries it links and the CA roots: no shell, no package manager,
# user 65532. Two names for one binary: `sluice` (its own flags) and
# `/bin/ratelimit`, which reads envoyproxy/ratelimit's environment, so Envoy
# Gateway's Deployment runs it with only the image changed.

FROM rust:1-bookworm AS build
WORKDIR /src
# Dependencies first, in a layer of their own: a change under src/ or
# crates/server/ rebuilds only sluice's own crates. The stubs stand in for
# the server and the sluice crate while the dependencies, the core and the
# stores build.
COPY Cargo.toml Cargo.lock ./
COPY benches benches
COPY crates/core crates/core
COPY crates/store crates/store
COPY crates/server/Cargo.toml crates/server/Cargo.toml
RUN mkdir -p src examples crates/server/src && echo 'fn main() {}' > src/main.rs \
    && touch src/lib.rs crates/server/src/lib.rs && echo 'fn main() {}' > examples/noop_rls.rs
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    cargo build --release --locked --bin sluice
COPY crates/server/src crates/server/src
COPY src src
COPY examples examples
# COPY keeps the files' own times, older than the stubs' build.
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    touch src/main.rs src/lib.rs crates/server/src/lib.rs \
    && cargo build --release --locked --bin sluice \
    && strip target/release/sluice
# The run stage's whole file system.
RUN mkdir -p /out/usr/local/bin /out/bin /out/etc/ssl/certs /out/etc/sluice \
    && cp target/release/sluice /out/usr/local/bin/sluice \
    && ln -s /usr/local/bin/sluice /out/bin/ratelimit \
    && for lib in $(ldd target/release/sluice | grep -o '/[^ ]*'); do cp --parents -L "$lib" /out; done \
    && cp /etc/ssl/certs/ca-certificates.crt /out/etc/ssl/certs/ \
    && printf 'hosts: files dns\n' > /out/etc/nsswitch.conf \
    && printf 'root:x:0:0::/:/nonexistent\nnonroot:x:65532:65532::/:/nonexistent\n' > /out/etc/passwd \
    && printf 'root:x:0:\nnonroot:x:65532:\n' > /out/etc/group

FROM scratch
COPY --from=build /out /
COPY descriptors /etc/sluice/descriptors
USER 65532:65532
# In a container the listeners face the container network; publish the admin
# port only where you need it. These are sluice's flags: /bin/ratelimit reads
# the reference's variables instead.
ENV SLUICE_CONFIG=/etc/sluice/descriptors \
    SLUICE_GRPC_ADDR=0.0.0.0:8081 \
    SLUICE_ADMIN_ADDR=0.0.0.0:8080 \
    SLUICE_LOG_FORMAT=json
EXPOSE 8081 8080
HEALTHCHECK --interval=5s --timeout=3s --start-period=5s CMD ["/usr/local/bin/sluice", "health"]
ENTRYPOINT ["/usr/local/bin/sluice"]
CMD ["serve"]
