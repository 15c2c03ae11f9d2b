# Two images from one build. The default target, `service`, runs every gpupack service; its first argument picks
# it (`webhook`, `extender`, `certs`, ...). It installs the package without extras (`pip install .`): the services
# need none of scipy, matplotlib and rich, so the image stays small. The `tools` target adds the extras the
# tools need (`gpupack mig-plan`, `report`, `simulate`); the mig-plan Job in manifests/mig-plan/ runs it:
#   docker build -t ghcr.io/gpupack/gpupack:VERSION .
#   docker build --target tools -t ghcr.io/gpupack/gpupack-tools:VERSION .
FROM python:3.11-slim AS build
WORKDIR /src
# What the wheel is built from: pyproject.toml and the files it names, gpupack/ and the top-level folders its
# symlinks point at (tests/test_distribution.py derives the list from the symlinks and checks it).
COPY pyproject.toml README.md LICENSE ./
COPY gpupack ./gpupack
COPY webhook ./webhook
COPY extender ./extender
COPY certs ./certs
RUN pip install --no-cache-dir --prefix=/install . \
 && pip install --no-cache-dir --prefix=/install-tools ".[report,simulate,migplan]"

FROM python:3.11-slim AS tools
COPY --from=build /install-tools /usr/local
USER 65532:65532
ENTRYPOINT ["gpupack"]
CMD ["--help"]

FROM python:3.11-slim AS service
COPY --from=build /install /usr/local
USER 65532:65532
ENTRYPOINT ["gpupack"]
CMD ["--help"]
