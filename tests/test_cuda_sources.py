"""The CUDA sources on a CPU machine (no GPU, no PyCUDA needed): every `#include` resolves to a
file of cuda_src or a generated header, generated headers are never stored in cuda_src, the
launch contracts the host reads (prepare signatures, block sizes) parse from the sources, and,
where nvcc is on PATH, every .cu compiles for Hopper exactly as CI compiles it."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from cirq_quasarq.core import rng
from cirq_quasarq.engines.cuda import loader

SOURCES = loader.source_dir()
CU_FILES = sorted(p.name for p in SOURCES.glob("*.cu"))
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.MULTILINE)
HOST = Path(loader.__file__).resolve().parent


@pytest.fixture(scope="module")
def generated(tmp_path_factory):
    directory = tmp_path_factory.mktemp("generated")
    loader.write_generated_headers(directory)
    return directory


def test_generated_headers_are_written_and_never_stored(generated):
    names = set(loader.generated_headers())
    assert names == {"opcodes.cuh", "program.cuh"}
    for name, text in loader.generated_headers().items():
        assert (generated / name).read_text() == text
        assert not (SOURCES / name).exists(), f"cuda_src/{name} is generated: write it with --write-headers"


def test_every_include_resolves(generated):
    files = sorted(SOURCES.glob("*.cu")) + sorted(SOURCES.glob("*.cuh"))
    assert CU_FILES and files
    for path in files:
        for inc in INCLUDE.findall(path.read_text()):
            assert (SOURCES / inc).is_file() or (generated / inc).is_file(), f"{path.name}: #include \"{inc}\""
    for name in CU_FILES:
        loader.inline_source(name)  # the loader's own inlining finds everything too


def test_write_headers_command_line(tmp_path):
    out = subprocess.run([sys.executable, "-m", "cirq_quasarq.engines.cuda.loader", "--write-headers",
                          str(tmp_path / "gen")], capture_output=True, text=True, check=True)
    for name, text in loader.generated_headers().items():
        assert (tmp_path / "gen" / name).read_text() == text, out.stdout


def test_importing_the_package_and_the_loader_never_imports_pycuda():
    code = ("import sys, cirq_quasarq.engines.cuda, cirq_quasarq.engines.cuda.loader as l; l.kernel_table(); "
            "assert 'pycuda' not in sys.modules, 'pycuda imported'")
    subprocess.run([sys.executable, "-c", code], check=True)


def test_kernel_table_parses_every_kernel():
    table = loader.kernel_table()
    assert sorted(table) == CU_FILES
    names = [name for kernels in table.values() for name in kernels]
    assert len(names) == len(set(names))
    for filename, kernels in table.items():
        text = (SOURCES / filename).read_text()
        assert len(kernels) == text.count('extern "C" __global__'), filename
        assert all(re.fullmatch(r"[PiIqQfd]*", sig) for sig in kernels.values()), kernels
    # Each kernel is launched by the host and named in its file's header comment (launch contract).
    host = "\n".join(p.read_text() for p in HOST.glob("*.py"))
    for filename, kernels in table.items():
        header = (SOURCES / filename).read_text().split("#include", 1)[0]
        for name in kernels:
            assert f'"{name}"' in host, f"{filename}: kernel {name} is never launched"
            assert name in header, f"{filename}: the header comment does not describe {name}"


def test_signature_parser():
    source = """
    // extern "C" __global__ void commented_out(int a) {}
    extern "C" __global__ void __launch_bounds__(QQ_BLOCK * (2))
    k1(const QQTables* T, const int* ctx, int i, qq_u32 k0, unsigned int k1,
       long long w, qq_u64 m, unsigned char* __restrict__ s, double d) { }
    extern "C" __global__ void k2() {}
    """
    assert loader.kernel_signatures(source) == {"k1": "PPiIIqQPd", "k2": ""}
    with pytest.raises(ValueError, match="short"):
        loader.kernel_signatures('extern "C" __global__ void k(short s) {}')
    with pytest.raises(ValueError, match="twice"):
        loader.kernel_signatures('extern "C" __global__ void k(int a) {}\nextern "C" __global__ void k(int a) {}')


def test_source_defines():
    assert loader.source_define("tables.cuh", "QQ_CTX_STRIDE") == 3 + loader.source_define("tables.cuh", "QQ_MAX_DEPTH")
    assert loader.source_define("transpose.cu", "QQ_TILE") == 32
    # Defines of included headers, generated ones too, are seen from the including file.
    assert loader.source_define("gates.cu", "QQ_MAX_DEPTH") == loader.source_define("tables.cuh", "QQ_MAX_DEPTH")
    assert loader.source_define("gates.cu", "QQ_NF") > 0
    # Division as C does it: toward zero.
    words = loader.source_define("measure_lowrank.cu", "QQ_LR_WORDS")
    assert words == (loader.source_define("measure_lowrank.cu", "QQ_LR_CHUNK") + 63) // 64
    with pytest.raises(KeyError):
        loader.source_define("gates.cu", "QQ_NO_SUCH_DEFINE")
    with pytest.raises(ValueError):
        loader.source_define("philox.cuh", "QQ_HD")


@pytest.mark.parametrize("filename", CU_FILES)
def test_every_kernel_compiles_with_plain_nvcc(generated, filename):
    nvcc = shutil.which("nvcc")
    if nvcc is None:
        pytest.skip("nvcc is not on PATH")
    result = subprocess.run([nvcc, "-arch=sm_90", "-std=c++17", "-I", str(SOURCES), "-I", str(generated), "--cubin",
                             "-o", "/dev/null", str(SOURCES / filename)], capture_output=True, text=True)
    assert result.returncode == 0, f"nvcc failed on cuda_src/{filename}:\n{result.stdout}\n{result.stderr}"


def test_kernel_cache_dir_follows_the_environment(monkeypatch, tmp_path):
    monkeypatch.setenv("CIRQ_QUASARQ_KERNEL_CACHE", str(tmp_path / "k"))
    assert loader.kernel_cache_dir() == tmp_path / "k"
    for off in ("", "0", " 0 "):
        monkeypatch.setenv("CIRQ_QUASARQ_KERNEL_CACHE", off)
        assert loader.kernel_cache_dir() is None
    monkeypatch.delenv("CIRQ_QUASARQ_KERNEL_CACHE")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert loader.kernel_cache_dir() == tmp_path / "xdg" / "cirq-quasarq" / "kernels"


def _host_probe(tmp_path, name: str, source: str) -> str:
    """A C++ program of cuda_src's host-callable headers, compiled for the CPU with nvcc (the test
    skips where nvcc is not on PATH): the path of its binary."""
    nvcc = shutil.which("nvcc")
    if nvcc is None:
        pytest.skip("nvcc is not on PATH")
    (tmp_path / f"{name}.cu").write_text(source)
    binary = tmp_path / name
    built = subprocess.run([nvcc, "-std=c++17", "-I", str(SOURCES), "-o", str(binary), str(tmp_path / f"{name}.cu")],
                           capture_output=True, text=True)
    assert built.returncode == 0, built.stderr
    return str(binary)


def test_bernoulli_words_of_the_header_equal_the_numpy_draws_on_the_host(tmp_path):
    """qq_bernoulli_word (sparse and bit-sliced modes) and qq_word32_quad, compiled for the CPU,
    give rng.bernoulli_words and rng.words32_range; the sparse mode's words that fire come out
    of qq_sparse_lanes alone too (what frame mode's deferred noise calls)."""

    key, slot, start, count = (0x2468ACE, 0x13579BDF), 11, (1 << 33) - 100, 400
    sparse_p, bits_p = 1e-3, 0.1
    cuts = ", ".join(f"{int(c)}ull" for c in rng._first_lane_cuts(sparse_p))
    binary = _host_probe(tmp_path, "bernoulli", r"""
#include <cstdio>
#include "philox.cuh"
#define NOISE %du
int main() {
    const qq_key key = {%du, %du};
    const qq_u64 cuts[63] = {%s};
    for (qq_u64 w = %dull; w < %dull; ++w) {
        const qq_u64 sparse = qq_bernoulli_word(key, NOISE, QQ_BERN_SPARSE, %dull, %dull, cuts, %du, w);
        const qq_u64 lanes = sparse ? qq_sparse_lanes(key, NOISE, %dull, cuts, %du, w) : 0ull;
        qq_u32 quad[4];
        qq_word32_quad(key, NOISE, %du, 0u, w >> 2, quad);
        std::printf("%%llu %%llu %%llu %%u\n", sparse, lanes,
                    qq_bernoulli_word(key, NOISE, QQ_BERN_BITS, %dull, 0ull, cuts, %du, w), quad[w & 3]);
    }
    return 0;
}
""" % (int(rng.Stream.NOISE), key[0], key[1], cuts, start, start + count, rng.fixed_point(sparse_p), rng._any_threshold(sparse_p), slot,
       rng.fixed_point(sparse_p), slot, slot, rng.fixed_point(bits_p), slot))
    printed = subprocess.run([binary], capture_output=True, text=True, check=True).stdout
    got = np.array([[int(v) for v in line.split()] for line in printed.strip().split("\n")], dtype=np.uint64)
    want_sparse = rng.bernoulli_words(key, [slot], sparse_p, start, count)[0]
    assert np.count_nonzero(want_sparse) > 10  # about 6% of 400 words fire
    np.testing.assert_array_equal(got[:, 0], want_sparse)
    np.testing.assert_array_equal(got[:, 1], want_sparse)
    np.testing.assert_array_equal(got[:, 2], rng.bernoulli_words(key, [slot], bits_p, start, count)[0])
    np.testing.assert_array_equal(got[:, 3], rng.words32_range(key, rng.Stream.NOISE, [slot], 0, start, count)[0])


_PHILOX_PROBE = r"""
#include <cstdio>
#include "philox.cuh"
int main() {
    const qq_key key = {0x1234567u, 0x89ABCDEFu};
    const qq_u64 index[] = {0ull, 5ull, (1ull << 33) - 3, (1ull << 33) + 1, (1ull << 34) + 7, (1ull << 40) + 11};
    for (qq_u64 i : index)
        std::printf("%llu %u\n", qq_word(key, 4u, 7u, 2u, i), qq_word32(key, 3u, 9u, 0u, i));
    return 0;
}
"""


def test_philox_header_equals_the_numpy_draws_on_the_host(tmp_path):
    """philox.cuh's functions are host-callable: compiled for the CPU they give rng.word and
    rng.words32_range's values, counters past 32 bits included (no GPU needed)."""

    binary = _host_probe(tmp_path, "philox", _PHILOX_PROBE)
    lines = subprocess.run([binary], capture_output=True, text=True, check=True).stdout.split("\n")
    key = (0x1234567, 0x89ABCDEF)
    for line, i in zip(lines, (0, 5, (1 << 33) - 3, (1 << 33) + 1, (1 << 34) + 7, (1 << 40) + 11)):
        word, word32 = (int(v) for v in line.split())
        assert word == rng.word(key, 4, 7, 2, i), i
        assert word32 == int(rng.words32_range(key, 3, 9, 0, i, 1)[0]), i


_PHASE_PROBE = r"""
#include "paulis.cuh"
#include <cstdio>
int main() {
    unsigned long long x1, z1, x2, z2;
    QQPhaseCount count{0ull, 0ull};
    int total = 0;
    while (scanf("%llu %llu %llu %llu", &x1, &z1, &x2, &z2) == 4) {  // a row: its words, one a line
        if (x1 == 0 && z1 == 0 && x2 == 0 && z2 == 0) {  // the end of a row
            printf("%d %d\n", total & 3, qq_phase_total(count));
            count = QQPhaseCount{0ull, 0ull};
            total = 0;
            continue;
        }
        total += qq_mul_phase(x1, z1, x2, z2);
        qq_phase_add(&count, x1, z1, x2, z2);
    }
    return 0;
}
"""


def test_bit_sliced_phase_counts_equal_the_product_phases_on_the_host(tmp_path):
    """paulis.cuh's QQPhaseCount (the low-rank pass's gate products: a 2-bit counter a position,
    one popcount a row) sums Pauli product phases mod 4 as qq_mul_phase word by word does and as
    core.paulis.product_phase gives them: every pair of letters, and rows of 1 to 9 random words."""
    from cirq_quasarq.core import paulis

    binary = _host_probe(tmp_path, "phase", _PHASE_PROBE)
    gen = np.random.default_rng(11)
    rows = [np.array([[a, b, c, d]], dtype=np.uint64) for a in (0, 1) for b in (0, 1) for c in (0, 1)
            for d in (0, 1) if a | b | c | d]  # the sixteen letter pairs, one bit each
    for k in range(200):
        words = gen.integers(0, 1 << 63, size=(1 + k % 9, 4), dtype=np.uint64) * np.uint64(2) + \
            gen.integers(0, 2, size=(1 + k % 9, 4), dtype=np.uint64)
        if k % 3 == 0:  # sparse rows too: mostly identity letters
            words &= gen.integers(0, 1 << 63, size=words.shape, dtype=np.uint64)
        rows.append(words[words.any(axis=1)])  # an all-zero line would end the row
    text = "".join("".join(" ".join(str(int(v)) for v in word) + "\n" for word in row) + "0 0 0 0\n" for row in rows)
    out = subprocess.run([binary], input=text, capture_output=True, text=True, check=True).stdout.split("\n")
    for row, line in zip(rows, out):
        word_by_word, counted = (int(v) for v in line.split())
        want = int(np.sum(paulis.product_phase(row[:, 0], row[:, 1], row[:, 2], row[:, 3]))) & 3
        assert word_by_word == want and counted == want, (row.tolist(), line)
    assert len([line for line in out if line]) == len(rows)


def test_shared_memory_opt_in_only_grows():
    """Every Launcher of a process shares the compiled functions, so a function's dynamic shared memory
    allowance is set only when a launch needs more than it has (never lowered by a smaller launch)."""
    import types

    calls = []

    class Function:
        def set_attribute(self, attribute, value):
            calls.append((attribute, value))

    first, second = (object.__new__(loader.Launcher) for _ in range(2))
    for launcher in (first, second):
        launcher._cuda = types.SimpleNamespace(Error=RuntimeError,
                                               function_attribute=types.SimpleNamespace(MAX_DYNAMIC_SHARED_SIZE_BYTES=7))
        launcher.last_launch = None
    fn = Function()
    for launcher, size in ((first, 1000), (second, 500), (first, 70000), (second, 2000), (first, 70000),
                           (second, 80000)):
        launcher._allow_shared(fn, "k", size)
    assert calls == [(7, 1000), (7, 70000), (7, 80000)]


def test_foldable_gate_windows_are_unconditional_unitaries():
    """measure.foldable_gates: a gate window goes into the low-rank update only when it holds
    unitaries alone (noise draws coins, classical control reads records); it counts the two-qubit
    gates, which take a group of rows each."""
    from cirq_quasarq.core.program import ProgramBuilder
    from cirq_quasarq.engines.cuda import measure

    b = ProgramBuilder(6)
    b.next_step()
    b.gate("CX", 0, 1)
    b.gate("H", 2)
    b.gate("ISWAP", 3, 4)
    b.gate("I", 5)
    plain = b.build().instructions
    assert measure.foldable_gates(plain, 0, len(plain)) == 2
    assert measure.foldable_gates(plain, 1, 2) == 0
    assert measure.foldable_gates(plain, 0, 0) is None
    b.noise("X_ERROR", [5], b.channel_id(1, [0.1], [[1]]))
    noisy = b.build().instructions
    assert measure.foldable_gates(noisy, 0, len(noisy)) is None
    b = ProgramBuilder(2)
    b.measure(0)
    b.next_step()
    b.gate("X", 1, cond=b.condition([(0, 0)], [False, True]))
    controlled = b.build().instructions
    assert measure.foldable_gates(controlled, 1, 2) is None


@pytest.mark.parametrize("seed", range(6))
def test_foldable_windows_equal_one_window_at_a_time(seed):
    """measure.foldable_windows (one sum a window's segment of rows) and measure.foldable_runs (a
    sum over the schedule's runs) against each window checked on its own slice, on the gate windows
    of random programs with noise and feedback, in any order, repeated, empty and adjacent."""
    import random

    from cirq_quasarq.core import opcodes
    from cirq_quasarq.core.program import COND, OP
    from cirq_quasarq.engines.cuda import measure
    from cirq_quasarq.engines.cuda.device_program import _build_plan
    from cirq_quasarq.schedule import schedule

    from .programs import random_program

    def one(ins, start, end):
        block = ins[start:end]
        if len(block) == 0 or (block[:, COND] >= 0).any() or (opcodes.KIND[block[:, OP]] != 0).any():
            return None
        return int(np.count_nonzero(opcodes.ARITY[block[:, OP]] == 2))

    program, _ = random_program(12 + seed, 30, seed, collapse=0.3, noise=seed % 2 == 1)
    sched = schedule(program)
    ins = sched.instructions
    windows = [(start, end) for kind, start, end, _ in _build_plan(program, sched).actions if kind == "G"]
    rng = random.Random(seed)
    extra = [(s, s) for s, _ in windows[:3]] + rng.sample(windows, min(3, len(windows)))
    given = windows + extra
    rng.shuffle(given)
    assert measure.foldable_windows(ins, given) == {w: one(ins, *w) for w in given}
    # from the runs: the plan's windows (whole runs) and the others (empty, split) through the rows
    assert measure.foldable_runs(sched, given) == {w: one(ins, *w) for w in given}
    if windows and windows[0][1] - windows[0][0] >= 2:  # a window split in two adjacent halves
        (start, end), rest = windows[0], windows[1:]
        halves = [(start, start + 1), (start + 1, end)] + rest
        assert measure.foldable_windows(ins, halves) == {w: one(ins, *w) for w in halves}
        assert measure.foldable_runs(sched, halves) == {w: one(ins, *w) for w in halves}
        with pytest.raises(ValueError, match="overlapping"):
            measure.foldable_windows(ins, halves + [(start, end)])


def test_wide_windows_pieces_cover_the_window_in_as_few_equal_pieces_as_the_batched_width_allows():
    """measure.wide_pieces: consecutive, covering [cstart, cend), ceil(k / batched_width(n)) of
    them, each at most batched_width(n) and at least half of it wide (never the one- or
    few-collapse remainder the low-rank path is not tested at), widths equal within one."""
    from cirq_quasarq.engines.cuda import measure

    for n in (4097, 5354, 13000, 100000):
        step = measure.batched_width(n)
        for k in (step + 1, step + 7, 2 * step - 1, 2 * step, 2 * step + 1, 1275, 2601, 10 * step + 3):
            pieces = measure.wide_pieces(n, 17, 17 + k)
            widths = [end - start for start, end in pieces]
            assert pieces[0][0] == 17 and pieces[-1][1] == 17 + k, (n, k)
            assert all(a[1] == b[0] for a, b in zip(pieces, pieces[1:])), (n, k)
            assert len(pieces) == -(-k // step) and max(widths) <= step, (n, k, widths)
            assert max(widths) - min(widths) <= 1 and 2 * min(widths) >= step, (n, k, widths)


def test_lowrank_windows_only_where_their_shared_memory_fits():
    """measure.window_path and wide_lowrank give the low-rank path only on a device whose blocks may
    take what its kernels ask for (the fused pass on two full chunks: 216 KiB); with less (an A100's
    164 KiB) the same windows take the rows path, and with lowrank_windows off too. The kernels'
    own launches (tables, exchange words, fragments) never ask for more than the bound."""
    from types import SimpleNamespace

    from cirq_quasarq.core.program import ProgramBuilder
    from cirq_quasarq.engines.cuda import measure

    need = measure.lowrank_shared_bytes()
    assert need == 216 * 1024 <= 227 * 1024  # an H100's or H200's opt-in shared memory is 227 KiB
    fused = (measure._tables_bytes(measure.LOWRANK_CHUNK) + measure.LOWRANK_VT_TILE_BYTES * measure.LOWRANK_CHUNK // 16
             + 8 * 2 * measure.LOWRANK_XCH_WORDS * (measure.LOWRANK_APPLY_BLOCK // 32))
    assert fused + measure.LOWRANK_STATIC_SHARED == need
    # the fused pass's launches ask for no more, whatever its two chunks
    assert max(measure.fused_shared_bytes(kc, kc2) for kc in range(1, measure.LOWRANK_CHUNK + 1)
               for kc2 in range(1, measure.LOWRANK_CHUNK + 1)) == fused
    n, k = 20000, 100
    b = ProgramBuilder(n)
    for q in range(k):
        b.measure(q)
    ins = b.build().instructions
    W = -(-n // 64)
    for optin, lowrank, want in ((227 * 1024, True, "lowrank"), (need, True, "lowrank"), (need - 1, True, "rows"),
                                 (164 * 1024, True, "rows"), (227 * 1024, False, "rows")):
        engine = SimpleNamespace(block_windows=True, batch_windows=True, lowrank_windows=lowrank, wide_lowrank=True,
                                 lowrank_min=measure.LOWRANK_MIN_COLLAPSES, smem_optin=optin)
        assert measure.window_path(engine, n, W, ins, 0, k) == want, (optin, lowrank)
        assert measure.wide_lowrank(engine, n, W, ins, 0, k, k) == (want == "lowrank"), (optin, lowrank)


def test_lowrank_tables_are_an_even_number_of_groups_of_five():
    """measure._tables_bytes, the host's twin of qq_lr_lookup_groups: groups of five consecutive
    collapses (a group may take bits of two words of alpha), an even number of them, 32 entries of a
    tile's words each."""
    from cirq_quasarq.engines.cuda import measure

    assert measure.LOWRANK_GROUP_BITS == 5
    for kc, groups in ((1, 2), (10, 2), (11, 4), (64, 14), (65, 14), (71, 16), (128, 26), (129, 26), (160, 32)):
        assert measure._tables_bytes(kc) == groups * 32 * 8 * measure.LOWRANK_TILE, kc


def test_idle_qubit_lists_of_folded_gate_windows(monkeypatch):
    """DeviceProgram.idle_qubits: per gate window the qubits none of its instructions acts on (both
    qubits of a two-qubit gate count, I acts), uploaded once (the missing windows together); past
    IDLE_LIST_BUDGET a window gets None and keeps the gate kernel."""
    from cirq_quasarq.core.program import ProgramBuilder
    from cirq_quasarq.engines.cuda import device_program
    from cirq_quasarq.schedule import schedule

    uploads = []

    class FakeCuda:  # device memory as host arrays at made-up addresses
        def mem_alloc(self, nbytes):
            uploads.append(None)
            return 4096 * len(uploads)

        def memcpy_htod(self, address, a):
            assert uploads[address // 4096 - 1] is None and a.flags.c_contiguous
            uploads[address // 4096 - 1] = np.array(a)

    b = ProgramBuilder(7)
    b.next_step()
    b.gate("CX", 0, 3)
    b.gate("H", 5)
    b.gate("I", 6)
    b.next_step()
    b.gate("SWAP", 1, 2)
    program = b.build()
    sched = schedule(program)
    dp = device_program.DeviceProgram(FakeCuda(), program, sched)
    first, before = (0, 3), len(uploads)
    lists = dp.idle_qubits([first, first])
    address, count = lists[first]
    assert count == 3 and len(uploads) == before + 1
    assert uploads[-1].tolist() == [1, 2, 4] and address == 4096 * len(uploads)
    lists = dp.idle_qubits([first, (3, 4)])
    assert len(uploads) == before + 2 and uploads[-1].tolist() == [0, 3, 4, 5, 6]
    assert lists[3, 4][1] == 5 and lists[first] == (address, count)
    monkeypatch.setattr(device_program, "IDLE_LIST_BUDGET", 0)
    assert dp.idle_qubits([(0, 1)])[0, 1] is None and len(uploads) == before + 2


def test_a_device_program_sends_its_small_arrays_as_one_upload():
    """DeviceProgram: the instruction table, then every array QQTables points to but the table in one
    upload (each at a 256-byte aligned offset, its bytes as `_pad` makes them), then the pointer
    blob: three allocations whatever the program holds (noise, confusion, feedback, loops)."""
    stim = pytest.importorskip("stim")
    from cirq_quasarq.compiler.stim_circuit import compile_stim
    from cirq_quasarq.engines.cuda import device_program
    from cirq_quasarq.schedule import schedule

    memory = {}  # address -> bytes

    class FakeCuda:
        def mem_alloc(self, nbytes):
            address = (len(memory) + 1) << 20  # 256-aligned, a MiB apart
            memory[address] = None
            return address

        def memcpy_htod(self, address, a):
            assert memory[address] is None and a.flags.c_contiguous
            memory[address] = np.array(a).reshape(-1).view(np.uint8).copy()

    program = compile_stim(stim.Circuit("""
        R 0 1 2
        X_ERROR(0.1) 0
        PAULI_CHANNEL_1(0.1, 0.2, 0.05) 1
        M 2
        REPEAT 3 {
            H 0
            CX 0 1 rec[-1] 2
            M(0.05) 0 1
        }
    """))
    assert program.channels and program.confusions and program.conditions and program.loops
    sched = schedule(program)
    dp = device_program.DeviceProgram(FakeCuda(), program, sched)
    assert len(memory) == 3
    table, packed, blob = memory
    want_table = device_program._pad(sched.instructions, np.int32)
    assert memory[table].view(np.int32).tolist() == want_table.tolist()
    pointers = memory[blob].view(np.uint64)[:12].tolist()
    assert pointers[0] == table and pointers[1] == packed and int(dp.tables) == blob
    assert all(p % 256 == 0 and packed <= p < packed + len(memory[packed]) for p in pointers[1:])
    counts = [len(sched.runs), program.num_qubits, program.num_records]
    assert memory[blob].view(np.uint64)[12:].tolist() == counts

    def sent(pointer, like):  # the bytes at a device address, as the array `like` was padded
        want = device_program._pad(like, np.int32)
        return memory[packed][pointer - packed:pointer - packed + want.nbytes].view(np.int32).tolist() == want.tolist()

    loops = [(loop.count, loop.rec_stride, loop.rand_stride, *sched.loop_runs[i]) for i, loop in enumerate(program.loops)]
    assert sent(pointers[1], sched.runs) and sent(pointers[2], np.array(loops)) and sent(pointers[3], program.ext_qubits)


def test_no_128_bit_integers_in_the_kernels():
    """nvcc 13.0 miscompiles `v & ~((unsigned __int128)1 << j)` for j >= 64 (the low word's mask is a
    64-bit rotate whose shifts clamp to zero, so the clear wipes bits 0..63): the low-rank collapse kept
    its per-pivot bits in such a type and a chunk with more than 64 distinct pivots came out wrong.
    Bit sets wider than a word are arrays of 64-bit words in cuda_src."""
    offenders = [p.name for p in sorted(SOURCES.glob("*.cu*"))
                 if re.search(r"__int128|__uint128", loader._COMMENT.sub(" ", p.read_text()))]
    assert not offenders, offenders


def test_the_bernoulli_modes_are_philox_cuhs():
    """rng.BernoulliMode (the NumPy draws', the device program's and the compiled draws' modes) is
    philox.cuh's QQ_BERN_*."""
    for mode in rng.BernoulliMode:
        assert loader.source_define("philox.cuh", f"QQ_BERN_{mode.name}") == mode
