# skewgate: a static binary on a distroless base. Build with `make image` (no image can be built on
# the development machines; CI builds it where a container runtime exists).
FROM golang:1.26 AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
ARG VERSION=dev
RUN CGO_ENABLED=0 go build -trimpath -ldflags "-s -w -X main.version=${VERSION}" -o /out/skewgate ./cmd/skewgate

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/skewgate /skewgate
USER 65532:65532
ENTRYPOINT ["/skewgate"]
CMD ["serve"]
