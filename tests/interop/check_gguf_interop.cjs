// Checks the GGUF files `betelgeuse make-model` writes with an independent reader, the npm
// package @huggingface/gguf (third_party/npm, installed by scripts/setup-deps.sh), against
// `betelgeuse info --json`:
//   1. the ci-scale model: every metadata key (in file order), its type and its value (long arrays:
//      count and first elements), the data offset, and every tensor's name, shape, type and
//      offset agree;
//   2. a copy whose metadata that package rewrote with variants llama.cpp accepts (per-layer
//      arrays for scalars and back, 32-bit integer arrays of the other signedness) and some only
//      we accept (counts as uint64, as make-model once wrote engram.pad_id; floats as float64)
//      still agrees with the package, reports the rewritten types, and loads in betelgeuse as the
//      same model (`info` prints the same hyper-parameters);
//   3. a copy with a count rewritten as a string is refused with one error line naming the key.
// Any disagreement, a missing package or a failing command exits 1 with a message: the test
// never passes without having run.
//
// usage: node check_gguf_interop.cjs --betelgeuse BIN --source SRC_DIR --npm NPM_DIR --models DIR
'use strict';

const { createRequire } = require('module');
const { spawnSync } = require('child_process');
const fs = require('fs');
const os = require('os');
const path = require('path');

function fail(msg) {
    console.error(`check_gguf_interop: FAIL: ${msg}`);
    process.exit(1);
}

function parse_args(argv) {
    const want = ['--betelgeuse', '--source', '--npm', '--models'];
    const out = {};
    for (let i = 2; i < argv.length; i += 2) {
        if (!want.includes(argv[i]) || i + 1 >= argv.length) fail(`bad argument '${argv[i]}'; usage: ${want.join(' X ')} X`);
        out[argv[i].slice(2)] = path.resolve(argv[i + 1]);
    }
    for (const w of want) if (!(w.slice(2) in out)) fail(`missing ${w}`);
    return out;
}

const args = parse_args(process.argv);

function load_package() {
    const manifest = path.join(args.npm, 'package.json');
    try {
        return createRequire(manifest)('@huggingface/gguf');
    } catch (e) {
        fail(`cannot load @huggingface/gguf from ${args.npm}/node_modules (${e.message.split('\n')[0]}); ` +
             'install it with scripts/setup-deps.sh (make deps)');
    }
}

const hf = load_package();
const VT = hf.GGUFValueType;

// Runs betelgeuse; returns {status, stdout, stderr}.
function betelgeuse(...cli) {
    const r = spawnSync(args.betelgeuse, cli, { encoding: 'utf8', maxBuffer: 256 << 20 });
    if (r.error) fail(`cannot run ${args.betelgeuse}: ${r.error.message}`);
    return r;
}

function betelgeuse_ok(...cli) {
    const r = betelgeuse(...cli);
    if (r.status !== 0) fail(`betelgeuse ${cli.join(' ')} exited ${r.status}: ${r.stderr.trim()}`);
    return r.stdout;
}

// info --json writes 64-bit integers as exact JSON integers, which JSON.parse would round to a
// double; every integer literal of 16 digits or more is read as a string instead (our JSON has
// no such digit run inside a string, and a float's digits follow its '.', never '[', ',' or ':').
function parse_exact(text) {
    return JSON.parse(text.replace(/(?<=[\[,:]\s*)(-?\d{16,})(?=\s*[,\]}])/g, '"$1"'));
}

function info_json(file) { return parse_exact(betelgeuse_ok('info', '--json', file)); }

// Our type names are GGUF's, lower case: VT[4] is 'UINT32', ours 'uint32'.
function type_name(t) { return String(VT[t]).toLowerCase(); }

const INTEGER = new Set([VT.UINT8, VT.INT8, VT.UINT16, VT.INT16, VT.UINT32, VT.INT32, VT.UINT64, VT.INT64]);

function same_scalar(ours, theirs, type) {
    if (INTEGER.has(type)) return BigInt(ours) === BigInt(theirs);
    if (type === VT.FLOAT32 || type === VT.FLOAT64) return ours === theirs || (ours === null && Number.isNaN(theirs));
    return ours === theirs;
}

// Metadata and tensors of one file, as the package and as info --json see them.
async function compare(file) {
    const theirs = await hf.gguf(file, { allowLocalFile: true, typedMetadata: true });
    const ours = info_json(file);
    const where = path.basename(file);
    const tm = theirs.typedMetadata;
    if (ours.version !== tm.version.value) fail(`${where}: version ${ours.version} vs ${tm.version.value}`);
    const keys = Object.keys(tm).filter(k => !['version', 'tensor_count', 'kv_count'].includes(k));
    if (keys.length !== Number(tm.kv_count.value)) fail(`${where}: the package lists ${keys.length} of ${tm.kv_count.value} keys`);
    if (ours.metadata.length !== keys.length) fail(`${where}: ${ours.metadata.length} keys in info --json, ${keys.length} in the package`);
    for (let i = 0; i < keys.length; ++i) {
        const o = ours.metadata[i], t = tm[keys[i]];
        if (o.key !== keys[i]) fail(`${where}: key ${i} is '${o.key}' in info --json, '${keys[i]}' in the package`);
        if (o.type !== type_name(t.type)) fail(`${where}: ${o.key} has type ${o.type} in info --json, ${type_name(t.type)} in the package`);
        if (t.type !== VT.ARRAY) {
            if (!same_scalar(o.value, t.value, t.type)) fail(`${where}: ${o.key} = ${o.value} in info --json, ${t.value} in the package`);
            continue;
        }
        if (t.subType === VT.ARRAY) fail(`${where}: ${o.key}: nested arrays are not compared`);
        if (o.elem_type !== type_name(t.subType)) fail(`${where}: ${o.key} holds ${o.elem_type} in info --json, ${type_name(t.subType)} in the package`);
        if (o.count !== t.value.length) fail(`${where}: ${o.key} has ${o.count} elements in info --json, ${t.value.length} in the package`);
        const listed = o.value !== undefined ? o.value : o.first;
        if (!Array.isArray(listed) || (o.value === undefined && o.count <= 64)) fail(`${where}: ${o.key}: no elements listed`);
        listed.forEach((x, j) => {
            if (!same_scalar(x, t.value[j], t.subType)) fail(`${where}: ${o.key}[${j}] = ${x} in info --json, ${t.value[j]} in the package`);
        });
    }
    if (BigInt(ours.data_offset) !== theirs.tensorDataOffset) fail(`${where}: data offset ${ours.data_offset} vs ${theirs.tensorDataOffset}`);
    if (ours.tensors.length !== theirs.tensorInfos.length) fail(`${where}: ${ours.tensors.length} tensors in info --json, ${theirs.tensorInfos.length} in the package`);
    ours.tensors.forEach((o, i) => {
        const t = theirs.tensorInfos[i];
        const shape = t.shape.map(String).join(',');
        if (o.name !== t.name || o.shape.map(String).join(',') !== shape || o.type_id !== t.dtype || BigInt(o.offset) !== t.offset)
            fail(`${where}: tensor ${i}: info --json has ${o.name} [${o.shape}] type ${o.type_id} at ${o.offset}, ` +
                 `the package ${t.name} [${shape}] type ${t.dtype} at ${t.offset}`);
    });
    return { theirs, ours };
}

// A copy of `file` whose metadata `change` rewrote (through the package's own writer) and whose
// tensor data is a hole of the same length: the header is all betelgeuse's loader reads.
async function rewritten(file, theirs, change, out) {
    const data_offset = Number(theirs.tensorDataOffset);
    const fd = fs.openSync(file, 'r');
    const head = Buffer.alloc(data_offset);
    fs.readSync(fd, head, 0, data_offset, 0);
    fs.closeSync(fd);
    const updated = {};
    for (const [k, v] of Object.entries(theirs.typedMetadata)) updated[k] = change(k, v) || v;
    const header = await hf.buildGgufHeader(new Blob([head]), updated, {
        littleEndian: theirs.littleEndian, tensorInfoByteRange: theirs.tensorInfoByteRange, alignment: 32 });
    fs.writeFileSync(out, Buffer.from(await header.arrayBuffer()));
    fs.truncateSync(out, header.size + (fs.statSync(file).size - data_offset));
    return out;
}

// `info` without the tensor table and the first two lines (path, file size): the model as loaded.
function model_as_loaded(file) { return betelgeuse_ok('info', '--no-tensors', file).split('\n').slice(2).join('\n'); }

async function main() {
    const model = path.join(args.models, 'ci-seed7-v2.gguf');  // the file tests/model_fixture.h ci_model() uses (kMakeModelBytesVersion 2)
    if (!fs.existsSync(model)) {
        fs.mkdirSync(args.models, { recursive: true });
        betelgeuse_ok('make-model', '--scale', path.join(args.source, 'scenarios/models/ci.json'), '--seed', '7', '--out', model);
    }
    const { theirs, ours } = await compare(model);
    const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'bg-interop-'));
    try {
        const a = 'deepseek41.';
        const n_layer = Number(theirs.typedMetadata[a + 'block_count'].value);
        const per_layer = v => ({ type: VT.ARRAY, subType: VT.UINT32, value: Array(n_layer).fill(v.value) });
        const variants = {
            [a + 'block_count']: v => ({ type: VT.UINT64, value: BigInt(v.value) }),
            [a + 'engram.pad_id']: v => ({ type: VT.UINT64, value: BigInt(v.value) }),
            [a + 'embedding_length']: v => ({ type: VT.INT32, value: v.value }),
            [a + 'attention.head_count']: per_layer,
            [a + 'expert_feed_forward_length']: per_layer,
            [a + 'swiglu_clamp_exp']: v => ({ type: VT.FLOAT32, value: v.value[0] }),
            [a + 'attention.layer_norm_rms_epsilon']: v => ({ type: VT.FLOAT64, value: v.value }),
            [a + 'attention.compress_ratios']: v => ({ type: VT.ARRAY, subType: VT.UINT32, value: v.value }),
            [a + 'engram.token_map']: v => ({ type: VT.ARRAY, subType: VT.INT32, value: v.value }),
        };
        for (const k of Object.keys(variants)) if (!(k in theirs.typedMetadata)) fail(`${k} is not in ${model}`);
        const variant = await rewritten(model, theirs, (k, v) => variants[k] && variants[k](v), path.join(tmp, 'variant.gguf'));
        const v = await compare(variant);
        for (const [k, make] of Object.entries(variants)) {
            const want = make(theirs.typedMetadata[k]);
            const got = v.ours.metadata.find(e => e.key === k);
            if (got.type !== type_name(want.type) || (want.subType !== undefined && got.elem_type !== type_name(want.subType)))
                fail(`variant: ${k} was not rewritten (info --json says ${got.type} ${got.elem_type || ''})`);
        }
        if (model_as_loaded(variant) !== model_as_loaded(model))
            fail(`the variant loads differently:\n${model_as_loaded(variant)}\nvs\n${model_as_loaded(model)}`);

        const hostile = await rewritten(model, theirs,
            k => k === a + 'block_count' ? { type: VT.STRING, value: '40' } : undefined, path.join(tmp, 'hostile.gguf'));
        const r = betelgeuse('info', hostile);
        const lines = r.stderr.trim().split('\n');
        const want = `key '${a}block_count' has type string, expected uint64`;
        if (r.status !== 1 || lines.length !== 1 || !lines[0].includes(want))
            fail(`a string block_count gave exit ${r.status} and '${r.stderr.trim()}', expected one line with "${want}"`);
        console.log(`check_gguf_interop: ok: ${ours.metadata.length} keys and ${ours.tensors.length} tensors of ` +
                    `${path.basename(model)} agree with @huggingface/gguf; ${Object.keys(variants).length} rewritten ` +
                    'keys read alike; a string count is refused');
    } finally {
        fs.rmSync(tmp, { recursive: true, force: true });
    }
}

main().catch(e => fail(e.stack || String(e)));
