# One image for every gpupack service; the first argument picks it (`webhook`, `extender`, `certs`, ...).
# It installs the package without extras (`pip install .`): the services need none of scipy, matplotlib and rich,
# and the image stays small. The tools refuse in one line naming their extra; to run one from the image (the
# mig-plan Job runs `gpupack mig-plan`, which needs scipy), build with e.g. `--build-arg EXTRAS=migplan`.
FROM python:3.11-slim AS build
ARG EXTRAS=""
WORKDIR /src
# What the wheel is built from: pyproject.toml and the files it names, gpupack/ and the top-level folders its
# symlinks point at (tests/test_distribution.py derives the list from the symlinks and checks it).
COPY pyproject.toml README.md LICENSE ./
COPY gpupack ./gpupack
COPY webhook ./webhook
COPY extender ./extender
COPY certs ./certs
RUN pip install --no-cache-dir --prefix=/install ".${EXTRAS:+[$EXTRAS]}"

FROM python:3.11-slim
COPY --from=build /install /usr/local
USER 65532:65532
ENTRYPOINT ["gpupack"]
CMD ["--help"]
