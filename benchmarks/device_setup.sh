# Sourced at the start of every command on the device machine (bash): `source benchmarks/device_setup.sh && ...`.
#
# Installs the wheels of .whl/ into /tmp/site (once per machine: a later call on the same warm machine finds them),
# unpacks .gpu/*.gz beside themselves, and exports what every run there needs: PYTHONPATH (the wheels, then src/,
# so the tree runs without an install), JAX_PLATFORMS=cpu (the image's jax would otherwise take the GPU's memory when
# a library imports it), HF_HUB_OFFLINE=1 (nothing can be fetched there), RETROMAE_COMMIT (the copy has no .git,
# so the benchmarks' provenance would say "unknown"; set it before sourcing, or it reads .gpu/commit) and
# PYTHONUNBUFFERED=1 (output reaches $OUT as it is printed). Both folders come from benchmarks/device_carry.sh.
# Returns non-zero, saying why, when a folder is missing or the install fails.

device_setup() {
    local site=/tmp/site
    [[ -d .whl && -d .gpu ]] || { echo "device_setup: .whl/ or .gpu/ missing: run benchmarks/device_carry.sh" \
        "here and name both in carry" >&2; return 1; }
    if [[ ! -f "$site/.installed" ]]; then
        python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$site" \
            .whl/*.whl || { echo "device_setup: installing .whl/*.whl into $site failed" >&2; return 1; }
        touch "$site/.installed"
    fi
    local packed
    for packed in $(find .gpu -name '*.gz'); do
        [[ -f "${packed%.gz}" ]] || gunzip -k "$packed" || return 1
    done
    export PYTHONPATH="$site:$PWD/src${PYTHONPATH:+:$PYTHONPATH}"
    export JAX_PLATFORMS=cpu HF_HUB_OFFLINE=1 PYTHONUNBUFFERED=1
    export RETROMAE_COMMIT="${RETROMAE_COMMIT:-$(cat .gpu/commit 2>/dev/null || echo unknown)}"
}

device_setup
