#include "runtime/launch/engine_launcher.h"

#include <unistd.h>

#include <cstdlib>
#include <iostream>
#include <set>

#include "psrt/error.h"
#include "runtime/launch/local_launcher.h"

namespace psrt::launch {
namespace {

struct Layout {
  std::size_t servers = 0;
  std::size_t workers = 0;
  std::string self;                                      // psrun, that servers run as
  std::vector<std::string> command;                      // what workers run
  std::vector<std::pair<std::string, std::string>> env;  // the job's, without role and rank
};

Layout layout_of(const JobSpec& job) {
  if (job.services.empty() || job.workers.empty() || job.services[0].argv.empty())
    throw Error(ErrorCode::kInvalidArgument, "an engine-launched job needs servers and workers");
  Layout l;
  l.servers = job.services.size();
  l.workers = job.workers.size();
  l.self = job.services[0].argv[0];
  l.command = job.workers[0].argv;
  // A server's environment is the job's plus its role and rank; a worker's also holds its own
  // RANK, LOCAL_RANK, ..., which each process derives from the engine instead (engine_env.h).
  for (const auto& kv : job.services[0].env)
    if (kv.first != "PSRT_ROLE" && kv.first != "PSRT_RANK") l.env.push_back(kv);
  return l;
}

// `SELF --role-from-env -- COMMAND...` appended to `argv`.
void append_program(std::vector<std::string>& argv, const Layout& l) {
  argv.insert(argv.end(), {l.self, "--role-from-env", "--"});
  argv.insert(argv.end(), l.command.begin(), l.command.end());
}

class EngineLauncher final : public LaunchBackend {
 public:
  EngineLauncher(std::string name, EngineLaunchOptions options,
                 ProcessSpec (*spec)(const JobSpec&, const EngineLaunchOptions&))
      : name_(std::move(name)), options_(std::move(options)), spec_(spec) {}

  std::string_view name() const override { return name_; }

  int run(const JobSpec& job) override {
    JobSpec engine_job;
    engine_job.workers.push_back(spec_(job, options_));
    engine_job.kill_grace = job.kill_grace;
    engine_job.on_workers_done = job.on_workers_done;
    if (options_.dry_run) return print(job, engine_job.workers[0]);
    LocalLauncher local;
    return local.run(engine_job);
  }

 private:
  int print(const JobSpec& job, const ProcessSpec& spec) const {
    std::cout << "psrun --dry-run: launcher " << name_ << " would run, with";
    for (const auto& kv : spec.env)
      std::cout << " " << kv.first << "="
                << (kv.first == "PSRT_SECRET" ? std::string("<secret>") : kv.second);
    std::cout << ":\n ";
    for (const auto& a : spec.argv)
      std::cout << " " << a;
    std::cout << "\n  ranks 0-" << job.services.size() - 1 << ": server 0-"
              << job.services.size() - 1 << " (psrun --internal-server); ranks "
              << job.services.size() << "-" << job.services.size() + job.workers.size() - 1
              << ": worker 0-" << job.workers.size() - 1 << "; " << name_
              << " places the ranks on its hosts\n";
    return 0;
  }

  std::string name_;
  EngineLaunchOptions options_;
  ProcessSpec (*spec_)(const JobSpec&, const EngineLaunchOptions&);
};

}  // namespace

ProcessSpec mpirun_spec(const JobSpec& job, const EngineLaunchOptions& o) {
  const Layout l = layout_of(job);
  ProcessSpec p;
  p.label = "mpirun";
  p.prefix_output = false;
  p.env = l.env;
  p.argv = {o.program.empty() ? "mpirun" : o.program};
  if (::geteuid() == 0) p.argv.emplace_back("--allow-run-as-root");
  // More ranks than cores is normal here (servers mostly wait); no binding to single cores.
  // rtc_hwloc_vmhole none: the daemons do not write the hwloc topology into shared memory,
  // which only MPI processes read (psrt's ranks are not); OpenMPI 4.1.4's orted crashed there
  // now and then (SIGSEGV in hwloc_shmem_topology_write), failing the job before it started.
  p.argv.insert(p.argv.end(), {"--oversubscribe", "--bind-to", "none", "--mca", "rtc_hwloc_vmhole",
                               "none", "-np", std::to_string(l.servers + l.workers)});
  p.argv.insert(p.argv.end(), o.host_args.begin(), o.host_args.end());
  p.argv.insert(p.argv.end(), o.extra_args.begin(), o.extra_args.end());
  for (const auto& kv : l.env)
    p.argv.insert(p.argv.end(), {"-x", kv.first});  // names only
  append_program(p.argv, l);
  return p;
}

ProcessSpec srun_spec(const JobSpec& job, const EngineLaunchOptions& o) {
  const Layout l = layout_of(job);
  ProcessSpec p;
  p.label = "srun";
  p.prefix_output = false;
  p.env = l.env;
  p.argv = {o.program.empty() ? "srun" : o.program,
            "--ntasks=" + std::to_string(l.servers + l.workers), "--kill-on-bad-exit=1",
            "--export=ALL", "--mpi=none"};
  p.argv.insert(p.argv.end(), o.host_args.begin(), o.host_args.end());
  p.argv.insert(p.argv.end(), o.extra_args.begin(), o.extra_args.end());
  append_program(p.argv, l);
  return p;
}

std::unique_ptr<LaunchBackend> make_mpi_launcher(EngineLaunchOptions options) {
  return std::make_unique<EngineLauncher>("mpi", std::move(options), &mpirun_spec);
}

std::unique_ptr<LaunchBackend> make_slurm_launcher(EngineLaunchOptions options) {
  const char* job_id = std::getenv("SLURM_JOB_ID");
  if (!options.dry_run && (!job_id || !*job_id))
    throw Error(ErrorCode::kInvalidArgument,
                "--launcher slurm runs inside a Slurm allocation (SLURM_JOB_ID is not set): "
                "`salloc -n S+N psrun --launcher slurm ...` or `sbatch deploy/slurm/psrt.sbatch`");
  return std::make_unique<EngineLauncher>("slurm", std::move(options), &srun_spec);
}

}  // namespace psrt::launch
