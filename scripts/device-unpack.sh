# Sourced by the device scripts, on the GPU machine: device-stage.sh packs the binaries to fit the
# device tool's carry (bundle.tar.xz); unpack them into $stage, once per call.
if [ -f "$stage/bundle.tar.xz" ]; then
  xz -dc "$stage/bundle.tar.xz" | tar -C "$stage" -xf - && rm -f "$stage/bundle.tar.xz"
fi
