# One image for every gpupack service; the first argument picks it (`webhook`, `extender`, `simulate`, ...).
FROM python:3.11-slim AS build
WORKDIR /src
COPY pyproject.toml README.md ./
COPY gpupack ./gpupack
COPY webhook ./webhook
COPY extender ./extender
COPY certs ./certs
RUN pip install --no-cache-dir --prefix=/install .

FROM python:3.11-slim
COPY --from=build /install /usr/local
USER 65532:65532
ENTRYPOINT ["gpupack"]
CMD ["--help"]
