"""The pre-flight without a GPU or a Cray: its verdicts on recorded NCCL_DEBUG=INFO outputs (written
from NCCL's documented ``host:pid:tid [dev] NCCL INFO message`` lines), the GTL check on a fake Cray
environment, and a fatal verdict stopping the sweep as bad input (exit 2)."""

from __future__ import annotations

import json
import sys
import types

import pytest
from mpi4py import MPI  # noqa: F401  (initialised here as in any in-process test, before the probe defers MPI_Init)

from bench.driver import preflight
from bench.errors import BadInput
from bench.plan.site import load_site
from bench.rank import preflight_probe
from collectives.libraries import xccl_debug_log as debug_log

#: Frontier: RCCL with the aws-ofi-rccl plugin over Slingshot (cxi)
FRONTIER_PLUGIN = """\
frontier00001:41230:41230 [0] NCCL INFO Bootstrap : Using hsn0:10.128.0.1<0>
frontier00001:41230:41230 [0] NCCL INFO NET/OFI Using aws-ofi-rccl 1.4.0
frontier00001:41230:41230 [0] NCCL INFO NET/OFI Selected Provider is cxi (found 4 nics)
frontier00001:41230:41230 [0] NCCL INFO Using network AWS Libfabric
RCCL version 2.18.3+hip6.2 HEAD:7a84c5d
frontier00001:41230:41290 [0] NCCL INFO comm 0x5d0 rank 0 nranks 16 cudaDev 0 busId c1000 - Init COMPLETE
"""
#: Frontier without the plugin: RCCL falls back to TCP sockets
FRONTIER_SOCKET = """\
frontier00001:41230:41230 [0] NCCL INFO Bootstrap : Using hsn0:10.128.0.1<0>
frontier00001:41230:41230 [0] NCCL INFO NET/Plugin : Plugin load (librccl-net.so) returned 2 : librccl-net.so: \
cannot open shared object file: No such file or directory
frontier00001:41230:41230 [0] NCCL INFO NET/Plugin : No plugin found, using internal implementation
frontier00001:41230:41230 [0] NCCL INFO NET/Socket : Using [0]hsn0:10.128.0.1<0> [1]hsn1:10.128.0.2<0>
frontier00001:41230:41230 [0] NCCL INFO Using network Socket
RCCL version 2.18.3+hip6.2 HEAD:7a84c5d
"""
#: an InfiniBand cluster, NCCL 2.2x's wording of a missing plugin
IB_CLUSTER = """\
gpu017:9001:9001 [0] NCCL INFO NET/Plugin: Could not find: libnccl-net.so. Using internal network plugin.
gpu017:9001:9001 [0] NCCL INFO NCCL version 2.21.5+cuda12.4
gpu017:9001:9001 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB [1]mlx5_1:1/IB ; OOB ib0:10.0.0.17<0>
gpu017:9001:9001 [0] NCCL INFO Using network IB
"""
#: Perlmutter: NCCL with a plugin loaded by its newer wording
PLUGIN_LOADED = """\
nid001:77:77 [0] NCCL INFO NET/Plugin: Loaded net plugin Libfabric (v9)
nid001:77:77 [0] NCCL INFO NET/OFI Selected Provider is cxi (found 4 nics)
nid001:77:77 [0] NCCL INFO Using network AWS Libfabric
NCCL version 2.19.4+cuda12.2
"""


def test_parse_the_plugin_over_libfabric():
    net = debug_log.parse(FRONTIER_PLUGIN.splitlines())
    assert (net.network, net.version, net.plugin, net.missing_plugin) == ("AWS Libfabric", "2.18.3+hip6.2",
                                                                          "aws-ofi-rccl 1.4.0", "")
    assert net.summary == "AWS Libfabric (aws-ofi-rccl 1.4.0)" and not net.socket
    assert net.socket_warning("RCCL") == ""


def test_parse_the_socket_fallback_names_the_missing_plugin():
    net = debug_log.parse(FRONTIER_SOCKET.splitlines())
    assert (net.network, net.missing_plugin, net.plugin) == ("Socket", "librccl-net.so", "")
    assert net.socket and net.interfaces.startswith("[0]hsn0")
    warning = net.socket_warning("RCCL")
    assert warning.startswith("RCCL uses TCP sockets between nodes (Using network Socket): its network plugin "
                              "librccl-net.so was not found")
    assert "aws-ofi-rccl" in warning


def test_parse_infiniband_and_newer_wordings():
    net = debug_log.parse(IB_CLUSTER.splitlines())
    assert (net.network, net.version, net.missing_plugin) == ("IB", "2.21.5+cuda12.4", "libnccl-net.so")
    loaded = debug_log.parse(PLUGIN_LOADED.splitlines())
    assert (loaded.network, loaded.plugin, loaded.version) == ("AWS Libfabric", "Libfabric (v9)", "2.19.4+cuda12.2")
    assert debug_log.parse([]) == debug_log.XcclNet()


def test_capture_leaves_the_users_own_settings(tmp_path, capsys):
    env: dict[str, str] = {}
    path = debug_log.capture(env)
    assert env["NCCL_DEBUG"] == "INFO" and env["NCCL_DEBUG_SUBSYS"] == "INIT,NET" and env["NCCL_DEBUG_FILE"] == path
    assert debug_log.capture({"NCCL_DEBUG_FILE": "/mine"}) is None
    assert debug_log.capture({"NCCL_DEBUG": "WARN"}) is None  # below INFO: NCCL says nothing to read
    traced = {"NCCL_DEBUG": "TRACE"}
    assert debug_log.capture(traced) and traced["NCCL_DEBUG"] == "TRACE" and "NCCL_DEBUG_SUBSYS" not in traced
    log = tmp_path / "nccl.log"
    log.write_text(FRONTIER_SOCKET + "frontier00001:1:1 [0] NCCL WARN something odd\n")
    captured = debug_log.Capture(str(log), user_asked=False)
    assert captured.read().network == "Socket"
    captured.hand_back()  # the warnings go back to the job's output, once
    assert capsys.readouterr().err == "frontier00001:1:1 [0] NCCL WARN something odd\n"
    with log.open("a") as more:
        more.write("frontier00001:1:1 [0] NCCL INFO later\n")
    captured.hand_back()
    assert capsys.readouterr().err == ""
    debug_log.Capture(str(log), user_asked=True).hand_back()  # the user's NCCL_DEBUG: every line
    assert capsys.readouterr().err.count("\n") == len(FRONTIER_SOCKET.splitlines()) + 2


def rank(number: int, host: str, **changes) -> dict:
    base = {"rank": number, "host": host, "reason": "", "local_rank": number % 4,
            "local_rank_from": "SLURM_LOCALID (before MPI_Init)", "index": number % 4,
            "pci_bus_id": f"0000:{0xc1 + number % 4:02x}:00.0", "numa_node": 3, "cpus": "49",
            "cpus_near_gpu": "near", "visible": "ROCR_VISIBLE_DEVICES=0,1,2,3", "env": {}}
    return {**base, **changes}


def xccl_of(text: str) -> dict:
    net = debug_log.parse(text.splitlines())
    return {"network": net.network, "version": net.version, "plugin": net.plugin,
            "missing_plugin": net.missing_plugin, "interfaces": net.interfaces, "plugin_failed": net.plugin_failed,
            "summary": net.summary}


def verdicts(report: dict, sharing: bool = False, xccl: bool = True, site=None,
             allowed: tuple[str, ...] = ()) -> dict[str, tuple[str, str]]:
    found = preflight.judge(report, sharing_allowed=sharing, library="RCCL", xccl=xccl, site=site, allowed=allowed,
                            binding=preflight.bind_claim(site, "srun"))
    return {verdict.check: (verdict.verdict, verdict.message) for verdict in found}


def test_two_nodes_with_the_plugin_pass():
    ranks = [rank(0, "n1", xccl=xccl_of(FRONTIER_PLUGIN)), rank(1, "n1"), rank(4, "n2"), rank(5, "n2")]
    found = verdicts({"ranks": ranks})
    assert {check: verdict for check, (verdict, _) in found.items()} == {
        "gtl": "ok", "gpu": "ok", "local_rank": "ok", "one_gpu_per_rank": "ok", "numa": "ok", "network": "ok"}
    assert found["network"][1] == "RCCL 2.18.3+hip6.2 uses AWS Libfabric (aws-ofi-rccl 1.4.0)"


#: Perlmutter without the plugin: NCCL's own wording, sockets on the Slingshot interfaces
PERLMUTTER_SOCKET = """\
nid001234:5501:5501 [0] NCCL INFO NCCL version 2.19.4+cuda12.2
nid001234:5501:5501 [0] NCCL INFO NET/Plugin: Could not find: libnccl-net.so. Using internal network plugin.
nid001234:5501:5501 [0] NCCL INFO NET/Socket : Using [0]hsn0:10.249.2.17<0> [1]hsn1:10.249.2.18<0>
nid001234:5501:5501 [0] NCCL INFO Using network Socket
"""


#: Frontier with aws-ofi-rccl found but no cxi provider in the libfabric it loaded: sockets all the same
FRONTIER_PLUGIN_FAILED = """\
frontier00001:41230:41230 [0] NCCL INFO NET/OFI Using aws-ofi-rccl 1.4.0
frontier00001:41230:41230 [0] NCCL INFO NET/OFI Unable to find a protocol that worked. Failing initialization.
frontier00001:41230:41230 [0] NCCL INFO NET/Socket : Using [0]hsn0:10.128.0.1<0>
frontier00001:41230:41230 [0] NCCL INFO Using network Socket
RCCL version 2.18.3+hip6.2 HEAD:7a84c5d
"""


def test_a_plugin_that_loads_and_gives_up_is_sockets_with_its_reason():
    net = debug_log.parse(FRONTIER_PLUGIN_FAILED.splitlines())
    assert net.socket and net.plugin == "aws-ofi-rccl 1.4.0"
    assert net.plugin_failed == "Unable to find a protocol that worked. Failing initialization"
    message = verdicts({"ranks": [rank(0, "n1", xccl=xccl_of(FRONTIER_PLUGIN_FAILED)), rank(8, "n2")]})["network"]
    assert message[0] == "fatal" and "aws-ofi-rccl 1.4.0 loaded but did not start (Unable to find" in message[1]
    assert "was not found" not in message[1]


def test_two_nodes_over_sockets_refuse_naming_the_plugin_and_the_flag():
    ranks = [rank(0, "n1", xccl=xccl_of(FRONTIER_SOCKET)), rank(4, "n2")]
    verdict, message = verdicts({"ranks": ranks})["network"]
    assert verdict == "fatal" and "librccl-net.so was not found" in message
    assert "AWS_OFI" not in message and "aws-ofi-rccl's lib folder on LD_LIBRARY_PATH" in message
    assert message.endswith("; --allow-xccl-sockets measures it all the same") and "\n" not in message
    allowed = preflight.judge({"ranks": ranks}, sharing_allowed=False, library="RCCL", xccl=True,
                              allowed=("xccl-sockets",))
    let = next(one for one in allowed if one.check == "network")
    assert let.verdict == "warning" and let.message.endswith("(measured all the same: --allow-xccl-sockets)")
    nccl = preflight.judge({"ranks": [rank(0, "nid001234", xccl=xccl_of(PERLMUTTER_SOCKET)), rank(4, "nid001235")]},
                           sharing_allowed=False, library="NCCL", xccl=True)
    refused = next(one for one in nccl if one.check == "network")
    assert refused.verdict == "fatal" and "NCCL uses TCP sockets" in refused.message
    assert "libnccl-net.so was not found" in refused.message
    one_node = verdicts({"ranks": [rank(0, "n1", xccl=xccl_of(FRONTIER_SOCKET)), rank(1, "n1")]})["network"]
    assert one_node[0] == "ok" and "one node" in one_node[1]  # sockets never carry a one-node job's data
    assert verdicts({"ranks": ranks}, xccl=False)["network"][0] == "skipped"
    # the plugin over Libfabric (NCCL's newer wording too) across nodes: no refusal
    for text in (FRONTIER_PLUGIN, PLUGIN_LOADED, IB_CLUSTER):
        assert verdicts({"ranks": [rank(0, "n1", xccl=xccl_of(text)), rank(4, "n2")]})["network"][0] == "ok"


def test_shared_gpus_are_refused_numa_and_a_late_local_rank_warned_without_a_binding_site():
    ranks = [rank(0, "n1", xccl=xccl_of(IB_CLUSTER)), rank(1, "n1", pci_bus_id="0000:c1:00.0", cpus_near_gpu="far",
                                                              cpus="0-7")]
    ranks[1]["local_rank_from"] = "shared-memory split after MPI_Init (none of SLURM_LOCALID, ... is set)"
    found = verdicts({"ranks": ranks})
    shared = found["one_gpu_per_rank"]
    # every GPU cell would be refused: nothing to measure, so refused before any node-hour
    assert shared[0] == "fatal" and "every GPU cell would be refused" in shared[1]
    assert "gpu_sharing: yes" in shared[1]
    assert verdicts({"ranks": ranks}, sharing=True)["one_gpu_per_rank"][0] == "ok"
    # no site: nothing claims the ranks are bound, so a warning
    assert found["numa"][0] == "warning" and "rank 1 on n1: CPUs 0-7" in found["numa"][1]
    assert found["local_rank"][0] == "warning" and "after MPI_Init" in found["local_rank"][1]


@pytest.mark.parametrize("name, binding", [("frontier", "--cpu-bind=mask_cpu"), ("perlmutter", "--cpu-bind=cores"),
                                           ("generic-openmpi-ucx", "--cpu-bind=cores")])
def test_numa_mismatch_is_refused_where_the_site_binds(name, binding):
    site = load_site(name, "--site").for_device("cuda")
    assert site.cpu_binding("srun") == binding
    far = [rank(0, "n1"), rank(1, "n1", cpus_near_gpu="far", cpus="0-6", numa_node=3)]
    refused = verdicts({"ranks": far}, site=site)["numa"]
    assert refused[0] == "fatal" and f"though site {name} binds them ({binding})" in refused[1]
    assert "--allow-numa-mismatch" in refused[1]
    let = verdicts({"ranks": far}, site=site, allowed=("numa-mismatch",))["numa"]
    assert let[0] == "warning" and "measured all the same: --allow-numa-mismatch" in let[1]
    assert verdicts({"ranks": [rank(0, "n1"), rank(1, "n1", pci_bus_id="0000:c2:00.0")]}, site=site)["numa"][0] == "ok"


def test_a_profile_without_binding_only_warns():
    site = load_site("frontier", "--site").for_device("rocm")
    unbound = site.model_copy(update={"srun": [o for o in site.srun if not o.startswith("--cpu-bind")]})
    assert unbound.cpu_binding("srun") == ""
    generic = load_site("generic-openmpi-ucx", "--site")
    assert generic.cpu_binding("mpiexec") == "--bind-to core" and generic.cpu_binding("") == ""
    far = [rank(0, "n1", cpus_near_gpu="partly", cpus="0-55")]
    assert verdicts({"ranks": far}, site=unbound)["numa"][0] == "warning"


def test_no_gpu_is_a_warning_and_nccl_is_not_tried():
    ranks = [rank(0, "n1", reason="CuPy is not installed", pci_bus_id=None, cpus_near_gpu="unknown")]
    found = verdicts({"ranks": ranks})
    assert found["gpu"][0] == "warning" and "CuPy is not installed" in found["gpu"][1]
    assert found["network"][0] == "skipped" and found["numa"][0] == "skipped"


CRAY_LIBMPI = "/opt/cray/pe/mpich/8.1.31/ofi/crayclang/17.0/lib/libmpi_cray.so.12"
CRAY_GTL = "/opt/cray/pe/mpich/8.1.31/gtl/lib/libmpi_gtl_hsa.so.0"
CRAY_TEXT = "MPI VERSION    : CRAY MPICH version 8.1.31.8 (ANL base 3.4a2)"


def test_gtl_check_on_a_fake_cray_environment():
    asked = {"MPICH_GPU_SUPPORT_ENABLED": "1"}
    problem = preflight_probe.gtl_problem(asked, {CRAY_LIBMPI, "/usr/lib64/libc.so.6"}, CRAY_TEXT)
    assert "every rank would abort in MPI_Init" in problem and 'MPICC="cc -shared"' in problem
    assert "craype-accel-amd-gfx90a" in problem and "--no-binary=mpi4py" in problem
    assert preflight_probe.gtl_problem(asked, {CRAY_LIBMPI, CRAY_GTL}, CRAY_TEXT) == ""  # linked
    assert preflight_probe.gtl_problem({}, {CRAY_LIBMPI}, CRAY_TEXT) == ""  # GPU support not asked
    assert preflight_probe.gtl_problem(asked, {"/usr/lib/libmpi.so.12"}, "MPICH Version: 4.2.0") == ""  # not Cray
    assert preflight_probe.gtl_problem(asked, {CRAY_LIBMPI}, "") != ""  # Cray by its library's path


def test_loaded_libraries_from_a_maps_file(tmp_path):
    maps = tmp_path / "maps"
    maps.write_text(f"7f00-7f01 r-xp 00000000 00:2a 123 {CRAY_LIBMPI}\n7f02-7f03 rw-p 00000000 00:00 0 [heap]\n"
                    f"7f04-7f05 r-xp 00000000 00:2a 124 {CRAY_GTL}\n")
    assert preflight_probe.loaded_libraries(str(maps)) == {CRAY_LIBMPI, CRAY_GTL}


def test_the_probe_stops_before_mpi_init_without_gtl(monkeypatch, capsys):
    monkeypatch.setenv("MPICH_GPU_SUPPORT_ENABLED", "1")
    monkeypatch.setattr(preflight_probe, "loaded_libraries", lambda: {CRAY_LIBMPI})
    monkeypatch.setattr(preflight_probe, "start_mpi", lambda device: pytest.fail("MPI_Init would abort"))
    assert preflight_probe.main(["rocm", "1"]) == 0
    report = preflight.report_of(capsys.readouterr().out)
    assert report["fatal"]["check"] == "gtl"


def fake_sweep(output: str, device: str = "rocm", timeout_s: float = 60, then: str = "") -> types.SimpleNamespace:
    cells = [types.SimpleNamespace(impl="xccl", intra="", inter="")]
    launch = types.SimpleNamespace(launch_id="n16-rpn8-rocm", nranks=16, ranks_per_node=8, cells=cells,
                                   where=types.SimpleNamespace(nhosts=2))
    program = f"import sys, time; sys.stdout.write({output!r}); sys.stdout.flush(); {then or 'pass'}"
    return types.SimpleNamespace(
        suite=types.SimpleNamespace(device=device, timeout_s=timeout_s, gpu_sharing="no"), launches=[launch],
        job_command=lambda launch, plan, program_argv: ([sys.executable, "-c", program], {}), allowed=(),
        where=types.SimpleNamespace(site=None), launcher=types.SimpleNamespace(site_section="srun"))


class Out:
    def __init__(self) -> None:
        self.lines: list[str] = []

    def print(self, text: str, **options) -> None:
        self.lines.append(text)


def test_a_fatal_verdict_is_bad_input_with_the_fix():
    line = preflight_probe.MARKER + json.dumps({"fatal": {"check": "gtl", "message": "GTL missing: rebuild"}})
    with pytest.raises(BadInput, match="^pre-flight: GTL missing: rebuild$"):
        preflight.run(fake_sweep(line + "\n"), Out())
    with pytest.raises(BadInput, match="the pre-flight launch ended .exit 0. before its ranks reported"):
        preflight.run(fake_sweep("MPI_Init: aborting\n"), Out())


def test_sockets_across_nodes_stop_the_sweep_before_measuring():
    report = {"ranks": [rank(0, "n1", xccl=xccl_of(FRONTIER_SOCKET)), rank(8, "n2")]}
    with pytest.raises(BadInput, match=r"^pre-flight: RCCL uses TCP sockets between nodes .*--allow-xccl-sockets"):
        preflight.run(fake_sweep(preflight_probe.MARKER + json.dumps(report) + "\n"), Out())


def test_warnings_are_printed_and_recorded():
    report = {"ranks": [rank(0, "n1", xccl=xccl_of(FRONTIER_SOCKET)), rank(8, "n2")]}
    out = Out()
    sweep = fake_sweep(preflight_probe.MARKER + json.dumps(report) + "\n")
    sweep.allowed = ("xccl-sockets",)
    record = preflight.record_of(preflight.run(sweep, out))
    assert record["launch_id"] == "n16-rpn8-rocm" and len(record["ranks"]) == 2
    assert [one["launch_id"] for one in record["probes"]] == ["n16-rpn8-rocm"] and record["with_xccl"]
    assert [warning.split(":")[0] for warning in record["warnings"]] == ["network"]
    assert any("pre-flight network: warning" in line and "(n16-rpn8-rocm)" in line and "librccl-net.so" in line
               for line in out.lines)
    assert preflight.run(fake_sweep("", device="host"), out) == []  # no GPU suite: nothing started


def test_a_launch_that_hangs_is_killed_and_fatal():
    with pytest.raises(BadInput, match=r"killed after 1 s"):
        preflight.run(fake_sweep("MPI_Init hangs\n", timeout_s=1, then="time.sleep(60)"), Out())


def test_env_says_whether_gtl_is_linked():
    from bench.driver.gpu_env import gtl_row

    assert gtl_row({"/usr/lib/libmpi.so.12"}, "MPICH Version: 4.2.0") is None  # not Cray: no row
    name, text, _ = gtl_row({CRAY_LIBMPI, CRAY_GTL}, CRAY_TEXT)
    assert name == "Cray GTL" and text.startswith(f"linked: {CRAY_GTL}")
    _, text, _ = gtl_row({CRAY_LIBMPI}, CRAY_TEXT)
    assert text.startswith("not linked: with MPICH_GPU_SUPPORT_ENABLED=1") and 'MPICC="cc -shared"' in text
    assert gtl_row() is None  # this machine's MPI is not Cray MPICH


def test_a_job_of_some_node_counts_is_probed_as_its_own_largest_launch():
    """``--nodes 1`` (a per-node-count batch job): the probe is shaped as that job's launch, never as the
    run's largest, which its allocation could not hold."""
    sweep = fake_sweep(preflight_probe.MARKER + json.dumps({"ranks": [rank(0, "n1")]}) + "\n")
    (large,) = sweep.launches
    small = types.SimpleNamespace(launch_id="n8-rpn8-rocm", nranks=8, ranks_per_node=8, cells=large.cells,
                                  where=types.SimpleNamespace(nhosts=1))
    sweep.launches = [small, large]
    asked = []
    command = sweep.job_command
    sweep.job_command = lambda launch, plan, program: (asked.append(launch.launch_id), command(launch, plan,
                                                                                                 program))[1]
    assert preflight.record_of(preflight.run(sweep, Out(), [small]))["launch_id"] == "n8-rpn8-rocm"
    asked.clear()
    assert preflight.record_of(preflight.run(sweep, Out()))["launch_id"] == "n16-rpn8-rocm"
    assert asked[-1] == "n16-rpn8-rocm"  # (the others: the launches' environments, read to group them)


def test_a_forced_network_that_does_not_start_is_refused_with_the_plugin_to_load():
    failed = {"error": "NcclError: NCCL_ERROR_INVALID_USAGE: invalid usage", "forced_net": "AWS Libfabric",
              "missing_plugin": "librccl-net.so", "plugin_failed": ""}
    found = verdicts({"ranks": [rank(0, "n1", xccl=failed), rank(8, "n2")]})["network"]
    assert found[0] == "fatal" and "with NCCL_NET=AWS Libfabric, which the site forces" in found[1]
    assert "librccl-net.so" in found[1] and "NCCL_NET: Socket" in found[1] and "\n" not in found[1]
    # not forced: the communicator's failure is fatal all the same (every cell would fail)
    plain = verdicts({"ranks": [rank(0, "n1", xccl={**failed, "forced_net": ""})]})["network"]
    assert plain[0] == "fatal" and "every NCCL/RCCL cell of these launches would fail" in plain[1]


def test_a_host_suites_checks_are_its_cpus_not_gpus():
    site = load_site("frontier", "--site").for_device("host")
    ranks = [{"rank": 0, "host": "n1", "reason": "", "local_rank": 0, "local_rank_from": "SLURM_LOCALID",
              "cpus": "1-3", "numa_nodes": [0], "env": {}},
             {"rank": 1, "host": "n1", "reason": "", "local_rank": 1, "local_rank_from": "SLURM_LOCALID",
              "cpus": "3-5", "numa_nodes": [0], "env": {}}]
    binding = preflight.bind_claim(site, "srun")
    found = {v.check: (v.verdict, v.message) for v in preflight.judge(
        {"ranks": ranks}, sharing_allowed=False, library="RCCL", xccl=False, site=site, device="host",
        binding=binding)}
    assert set(found) == {"gtl", "local_rank", "cpus"}
    assert found["cpus"][0] == "warning" and "ranks 0 and 1 on n1 share CPUs 3" in found["cpus"][1]
    ranks[1]["cpus"] = "4-6"
    found = {v.check: v for v in preflight.judge({"ranks": ranks}, sharing_allowed=False, library="RCCL",
                                                  xccl=False, site=site, device="host", binding=binding)}
    assert found["cpus"].verdict == "ok" and "NUMA nodes [0]" in found["cpus"].message
