"""omni.host.conditions (and its readers) and omni.host.tuning on canned sys/
and proc/ trees: a tuned 2-socket bare-metal host, an untuned one, a VM like
the CI machine, a host without cpufreq; tune and reset on a tree, byte for
byte; the omni host commands on a tree."""

from __future__ import annotations

import errno
import json
import os
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from omni.cli.main import app
from omni.errors import OmniError
from omni.host import conditions, cpu_conditions, memory_conditions, readings, tuning

CPU = "sys/devices/system/cpu"
THP = "sys/kernel/mm/transparent_hugepage"
SYSCTL = "proc/sys/kernel"


def thp_choice(options: str, chosen: str) -> str:
    """sysfs's way: ``always defer [madvise] never``."""
    return " ".join(f"[{o}]" if o == chosen else o for o in options.split()) + "\n"


def stat_text(steal: int) -> str:
    # user nice system idle iowait irq softirq steal guest guest_nice
    return (
        f"cpu  400 0 100 {9400 - 2 * steal} 0 0 0 {2 * steal} 0 0\n"
        + "".join(f"cpu{c} 100 0 25 {2350 - steal // 2} 0 0 0 {steal // 2} 0 0\n" for c in range(4))
        + "intr 0\nctxt 0\n"
    )


INTERRUPTS = """\
           CPU0       CPU1       CPU2       CPU3
  0:         40          0          0          0   IO-APIC   2-edge      timer
 24:       1000          0          7          0   PCI-MSI 1-edge      eth0
 25:          0          0          0          0   PCI-MSI 2-edge      eth0-idle
NMI:          0          0          0          0   Non-maskable interrupts
LOC:       5000       5000       5000       5000   Local timer interrupts
"""


def bare_metal(tuned: bool) -> dict[str, str]:
    """Two sockets, one node each, 4 CPUs without SMT, intel_pstate."""
    files = {
        f"{CPU}/online": "0-3\n",
        f"{CPU}/present": "0-3\n",
        f"{CPU}/isolated": "2-3\n" if tuned else "\n",
        f"{CPU}/smt/control": "off\n",
        f"{CPU}/smt/active": "0\n",
        f"{CPU}/intel_pstate/no_turbo": "1\n" if tuned else "0\n",
        "sys/devices/system/node/node0/cpulist": "0-1\n",
        "sys/devices/system/node/node1/cpulist": "2-3\n",
        f"{THP}/enabled": thp_choice("always madvise never", "always"),
        f"{THP}/defrag": thp_choice("always defer defer+madvise madvise never", "defer" if tuned else "always"),
        "sys/kernel/mm/ksm/run": "0\n" if tuned else "1\n",
        f"{SYSCTL}/numa_balancing": "0\n" if tuned else "1\n",
        f"{SYSCTL}/perf_event_paranoid": "1\n" if tuned else "2\n",
        f"{SYSCTL}/perf_event_max_sample_rate": "1\n" if tuned else "100000\n",
        f"{SYSCTL}/randomize_va_space": "2\n" if tuned else "0\n",
        "sys/class/dmi/id/product_name": "PowerEdge R760\n",
        "proc/cpuinfo": "processor\t: 0\nflags\t\t: fpu avx512f amx_tile\n\n",
        "proc/meminfo": "MemTotal: 1000000 kB\nSwapTotal: 4194304 kB\nSwapFree: "
        + ("4194304" if tuned else "3145728")
        + " kB\n",
        "proc/stat": stat_text(0),
        "proc/interrupts": INTERRUPTS,
        "proc/irq/default_smp_affinity": "3\n" if tuned else "f\n",
        "proc/irq/0/smp_affinity_list": "0\n",
        "proc/irq/24/smp_affinity_list": "0-1\n" if tuned else "0-3\n",
        "proc/irq/25/smp_affinity_list": "2\n",
    }
    for cpu in range(4):
        topo = f"{CPU}/cpu{cpu}/topology"
        files[f"{topo}/physical_package_id"] = f"{cpu // 2}\n"
        files[f"{topo}/thread_siblings_list"] = f"{cpu}\n"
        freq = f"{CPU}/cpu{cpu}/cpufreq"
        governor = "performance" if tuned or cpu >= 2 else "powersave"
        files[f"{freq}/scaling_governor"] = f"{governor}\n"
        files[f"{freq}/scaling_driver"] = "intel_pstate\n"
        files[f"{freq}/cpuinfo_max_freq"] = "3800000\n"
        files[f"{freq}/cpuinfo_min_freq"] = "800000\n"
        files[f"{freq}/scaling_min_freq"] = "3800000\n" if tuned else "800000\n"
        files[f"{freq}/scaling_max_freq"] = "3800000\n"
    return files


def vm_like_ci() -> dict[str, str]:
    """What the CI machine (a Firecracker guest, 2 vCPUs) shows: no cpufreq,
    no DMI, SMT notsupported, THP madvise, the hypervisor flag, some steal."""
    return {
        f"{CPU}/online": "0-1\n",
        f"{CPU}/isolated": "\n",
        f"{CPU}/smt/control": "notsupported\n",
        f"{CPU}/smt/active": "0\n",
        f"{CPU}/cpu0/topology/physical_package_id": "0\n",
        f"{CPU}/cpu1/topology/physical_package_id": "0\n",
        "sys/devices/system/node/node0/cpulist": "0-1\n",
        f"{THP}/enabled": thp_choice("always madvise never", "madvise"),
        f"{THP}/defrag": thp_choice("always defer defer+madvise madvise never", "madvise"),
        "sys/kernel/mm/ksm/run": "0\n",
        f"{SYSCTL}/numa_balancing": "0\n",
        f"{SYSCTL}/perf_event_paranoid": "2\n",
        f"{SYSCTL}/perf_event_max_sample_rate": "100000\n",
        f"{SYSCTL}/randomize_va_space": "2\n",
        "proc/cpuinfo": "processor\t: 0\nflags\t\t: fpu avx2 hypervisor\n\n",
        "proc/meminfo": "SwapTotal: 0 kB\nSwapFree: 0 kB\n",
        "proc/stat": "cpu  1158293 15 196594 3128480 8947 0 3461 16474 0 0\n"
        "cpu0 582055 8 99348 1562137 3151 0 1463 7296 0 0\n"
        "cpu1 576238 7 97246 1566343 5796 0 1997 9177 0 0\n",
        "proc/interrupts": "           CPU0       CPU1\n 24:          1          0  IO-APIC   5-edge      ACPI:Ged\n",
        "proc/irq/default_smp_affinity": "3\n",
        "proc/irq/24/smp_affinity_list": "0-1\n",
    }


def make_tree(root: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


def snapshot(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def by_name(found) -> dict[str, readings.Condition]:
    return {c.name: c for c in found}


@pytest.fixture
def tuned(tmp_path) -> Path:
    return make_tree(tmp_path / "tuned", bare_metal(tuned=True))


@pytest.fixture
def untuned(tmp_path) -> Path:
    return make_tree(tmp_path / "untuned", bare_metal(tuned=False))


@pytest.fixture
def vm(tmp_path) -> Path:
    return make_tree(tmp_path / "vm", vm_like_ci())


def test_every_condition_has_a_known_verdict_a_reason_and_a_fix_for_warnings(untuned, vm):
    for root in (untuned, vm):
        for condition in conditions.check(root, [2, 3] if root == untuned else [1]):
            assert condition.verdict in readings.VERDICTS, condition
            assert condition.why.count(".") <= 1 and len(condition.why) > 40, condition.name
            if condition.verdict == "warn":
                assert condition.fix, condition.name


def test_a_tuned_bare_metal_host_warns_of_nothing(tuned):
    found = by_name(conditions.check(tuned, [2, 3]))
    assert conditions.moving_conditions(found.values()) == []
    assert found["governor"].value == "performance" and found["governor"].verdict == "ok"
    assert found["freq_khz"].value == "3800000-3800000" and found["freq_khz"].verdict == "ok"
    assert found["boost"].value == "off" and "intel_pstate" in found["boost"].detail
    assert found["thp_defrag"].value == "defer" and found["isolated"].verdict == "ok"
    assert found["nodes_per_socket"].value == "1" and found["hypervisor"].value == "none"
    assert found["irq_affinity"].value == "none" and found["steal_pct"].verdict == "ok"


def test_an_untuned_host_warns_of_what_moves_numbers(untuned):
    found = by_name(conditions.check(untuned, [2, 3]))
    assert found["governor"].value == "0-1 powersave; 2-3 performance"
    warned = {c.name for c in found.values() if c.verdict == "warn"}
    assert warned == {
        "governor",
        "boost",
        "thp_defrag",
        "numa_balancing",
        "ksm",
        "swap_used_mb",
        "irq_affinity",
        "aslr",
    }
    assert found["freq_khz"].verdict == "info"  # min below max: the governor picks
    assert found["swap_used_mb"].value == "1024"
    # IRQ 24 fired on CPU 0 and may land on 2-3; 25 is on 2 but never fired; 0 is on CPU 0
    assert found["irq_affinity"].value == "24"
    lines = conditions.moving_conditions(found.values())
    assert len(lines) == len(warned) and any(line.startswith("numa_balancing 1: ") for line in lines)


def test_numa_balancing_on_one_node_is_information(untuned):
    shutil.rmtree(untuned / "sys/devices/system/node/node1")
    (untuned / "sys/devices/system/node/node0/cpulist").write_text("0-3\n")
    assert memory_conditions.read_numa_balancing(untuned).verdict == "info"


def test_the_vm_like_ci_shows_unknown_frequency_and_its_hypervisor(vm):
    found = by_name(conditions.check(vm, [1]))
    assert {found[n].verdict for n in ("governor", "freq_khz", "boost")} == {"unknown"}
    assert found["smt"].value == "notsupported" and found["thp_enabled"].verdict == "info"
    assert found["hypervisor"].value == "yes" and found["hypervisor"].verdict == "info"
    # cpu1: 9177 steal ticks of 2256804
    assert found["steal_pct"].value == "0.41" and found["steal_pct"].detail == "since boot on cpus 1"
    assert found["nohz_full"].value == readings.ABSENT and found["irq_affinity"].verdict == "warn"


def test_a_host_without_cpufreq_or_sysctls_reads_as_unknown(untuned):
    for cpu in range(4):
        shutil.rmtree(untuned / CPU / f"cpu{cpu}" / "cpufreq")
    shutil.rmtree(untuned / CPU / "intel_pstate")
    shutil.rmtree(untuned / SYSCTL)
    found = by_name(conditions.check(untuned))
    for name in ("governor", "freq_khz", "boost", "numa_balancing", "perf_event_paranoid", "aslr"):
        assert (found[name].value, found[name].verdict) == (readings.ABSENT, "unknown"), name


def test_steal_over_a_window_counts_only_the_window():
    before = "cpu  200 0 0 1800 0 0 0 0 0 0\ncpu0 100 0 0 900 0 0 0 0 0 0\ncpu1 100 0 0 900 0 0 0 0 0 0\n"
    after = "cpu  300 0 0 3800 0 0 0 50 0 0\ncpu0 150 0 0 1900 0 0 0 50 0 0\ncpu1 150 0 0 1900 0 0 0 0 0 0\n"
    assert cpu_conditions.steal_condition(before).verdict == "ok"  # none since boot
    window = cpu_conditions.steal_condition(before, after, [0])
    assert (window.value, window.verdict) == ("4.55", "warn")  # 50 of 1100 ticks
    assert window.detail == "over the sample window on cpus 0"
    assert cpu_conditions.steal_condition(before, after, [1]).value == "0.00"


def test_host_conditions_are_flat_strings_that_compare_across_rows(tuned, untuned):
    rows = [conditions.host_conditions(tuned), conditions.host_conditions(tuned), conditions.host_conditions(untuned)]
    assert list(rows[0]) == list(conditions.CONDITION_KEYS)
    assert json.loads(json.dumps(rows)) == rows
    changed = conditions.changed_conditions(rows)
    assert any(line.startswith("governor changed during the sweep: 'performance' in 2 rows") for line in changed)
    assert not any(line.startswith(("smt ", "hypervisor ")) for line in changed)
    assert conditions.changed_conditions(rows[:2]) == []


def test_interrupts_and_cpu_masks_parse_and_format():
    counts = cpu_conditions.parse_interrupts(INTERRUPTS)
    assert counts["24"] == {0: 1000, 1: 0, 2: 7, 3: 0} and "NMI" not in counts
    for cpus, text in (([0, 1], "3"), ([0, 32], "1,00000001"), ([4], "10")):
        assert tuning.format_cpumask(cpus) == text and tuning.parse_cpumask(text) == cpus
    assert readings.selected("always defer [madvise] never\n") == "madvise" and readings.selected("defer\n") == "defer"


def test_tune_then_reset_restores_every_file_byte_for_byte(untuned, tmp_path):
    before = snapshot(untuned)
    state = tmp_path / "state" / "tune.json"
    changes = tuning.tune(untuned, [2, 3], state)
    assert not [c for c in changes if c.error]
    found = by_name(conditions.check(untuned, [2, 3]))
    for name in ("governor", "freq_khz", "boost", "thp_defrag", "numa_balancing", "ksm", "irq_affinity", "aslr"):
        assert found[name].verdict == "ok", found[name]
    assert (untuned / "proc/irq/24/smp_affinity_list").read_text() == "0-1\n"
    assert (untuned / "proc/irq/25/smp_affinity_list").read_text() == "0-1\n"  # only 2 was allowed: all others
    assert (untuned / "proc/irq/default_smp_affinity").read_text() == "3\n"
    assert {c.target for c in changes if c.name == "governor"} == {"cpu0", "cpu1"}  # 2-3 already performance
    assert json.loads(state.read_text())["root"] == str(untuned.resolve())
    restored = tuning.reset(untuned, state)
    assert not [c for c in restored if c.error] and not state.exists()
    after = snapshot(untuned)
    # a choice file reads 'always [defer] ...' on sysfs but takes the bare word, which a plain file then shows
    choice = {f"{THP}/defrag"}
    assert {k: v for k, v in after.items() if k not in choice} == {k: v for k, v in before.items() if k not in choice}
    assert after[f"{THP}/defrag"] == b"always\n"


def test_a_second_tune_keeps_the_first_originals(untuned, tmp_path):
    state = tmp_path / "tune.json"
    tuning.tune(untuned, [2, 3], state)
    governor = untuned / CPU / "cpu0/cpufreq/scaling_governor"
    governor.write_text("schedutil\n")  # someone changed it between the tunes
    second = tuning.tune(untuned, [2, 3], state)
    assert [(c.target, c.old) for c in second] == [("cpu0", "schedutil")]
    tuning.reset(untuned, state)
    assert governor.read_text() == "powersave\n"
    assert (untuned / SYSCTL / "numa_balancing").read_text() == "1\n"


def test_a_failed_write_is_reported_and_not_recorded(untuned, tmp_path, monkeypatch):
    state = tmp_path / "tune.json"
    refused = str(untuned / SYSCTL / "numa_balancing")
    real_open = os.open

    def refusing_open(path, flags, *args):
        if str(path) == refused and flags & os.O_WRONLY:
            raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), path)
        return real_open(path, flags, *args)

    monkeypatch.setattr(tuning.os, "open", refusing_open)
    changes = tuning.tune(untuned, [2, 3], state)
    failed = [c for c in changes if c.error]
    assert [(c.name, c.error) for c in failed] == [("numa_balancing", "Permission denied")]
    assert refused not in {e["path"] for e in json.loads(state.read_text())["writes"]}
    assert (untuned / SYSCTL / "numa_balancing").read_text() == "1\n"
    assert any("FAILED: Permission denied" in line for line in tuning.describe_changes(changes))


def test_an_absent_file_is_reported_and_dry_run_writes_nothing(vm, tmp_path):
    before = snapshot(vm)
    state = tmp_path / "tune.json"
    planned = tuning.tune(vm, [1], state, dry_run=True)
    assert snapshot(vm) == before and not state.exists()
    assert {c.name for c in planned if c.error == "absent"} == {"governor", "boost"}
    assert {(c.name, c.old, c.new) for c in planned if not c.error} >= {("thp_defrag", "madvise", "defer")}


def test_reset_needs_a_state_of_the_same_root(untuned, vm, tmp_path):
    state = tmp_path / "tune.json"
    assert tuning.reset(untuned, state) == []  # nothing tuned: nothing to reset, and no error
    tuning.tune(untuned, None, state)
    with pytest.raises(OmniError, match="records a tune of root"):
        tuning.reset(vm, state)
    state.write_text("{")
    with pytest.raises(OmniError, match="cannot read omni host tune's state"):
        tuning.reset(untuned, state)


def test_the_host_commands_run_on_a_fixture_root(untuned, tmp_path):
    runner = CliRunner()
    root = str(untuned)
    shown = runner.invoke(app, ["host", "check", "--sysfs-root", root, "--cpus", "2-3"])
    assert shown.exit_code == 0, shown.output
    for name in conditions.CONDITION_KEYS + ("irq_affinity", "steal_pct"):
        assert name in shown.stdout
    assert "fix: omni host tune" in shown.stdout
    as_json = runner.invoke(app, ["host", "check", "--sysfs-root", root, "--json"])
    assert {c["name"] for c in json.loads(as_json.stdout)} >= set(conditions.CONDITION_KEYS)
    state = str(tmp_path / "tune.json")
    dry = runner.invoke(app, ["host", "tune", "--sysfs-root", root, "--cpus", "2-3", "--dry-run", "--state", state])
    assert "governor cpu0-1: powersave -> performance" in dry.stdout and not Path(state).exists()
    tuned = runner.invoke(app, ["host", "tune", "--sysfs-root", root, "--cpus", "2-3", "--state", state])
    assert tuned.exit_code == 0 and "irq_affinity irq 24: 0-3 -> 0-1" in tuned.stdout
    reset = runner.invoke(app, ["host", "reset", "--sysfs-root", root, "--state", state])
    assert reset.exit_code == 0 and "governor cpu0-1: performance -> powersave" in reset.stdout


def test_swap_in_use_changes_only_when_it_starts_or_stops():
    from omni.host.conditions import changed_conditions

    rows = [{"swap_used_mb": "12", "governor": "performance"}, {"swap_used_mb": "40", "governor": "performance"}]
    assert changed_conditions(rows) == []
    rows.append({"swap_used_mb": "0", "governor": "performance"})
    assert changed_conditions(rows) == ["swap_used_mb changed during the sweep: 'in use' in 2 rows, 'none' in 1 row"]
