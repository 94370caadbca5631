# bwlab-nri's image: docker build -f deploy/nri.Dockerfile -t bwlab-nri . (from the repository
# root). A static Go binary on an empty base: nothing in the image but the plugin.
FROM golang:1.26-bookworm AS build
WORKDIR /src
COPY nri/ .
RUN CGO_ENABLED=0 go build -trimpath -ldflags="-s -w" -o /bwlab-nri .

FROM scratch
COPY --from=build /bwlab-nri /bwlab-nri
ENTRYPOINT ["/bwlab-nri"]
