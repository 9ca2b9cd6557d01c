#include "tools/psrun/ssh_options.h"

#include <CLI/CLI.hpp>
#include <sstream>

namespace psrt::psrun {

void add_ssh_options(CLI::App& app, SshFlags& f) {
  app.add_option("-H,--hosts", f.hosts,
                 "--launcher ssh: hosts and their worker slots, host1:4,host2:4 (slots default "
                 "1; IPv6 as [fd00::1]:4); --launcher mpi: passed to mpirun as -H");
  app.add_option("--hostfile", f.hostfile,
                 "--launcher ssh: a file of 'host slots=N' lines (# comments), as mpirun reads; "
                 "--launcher mpi: passed to mpirun as --hostfile");
  app.add_option("--server-hosts", f.server_hosts,
                 "--launcher ssh: comma-separated hosts for the servers (round-robin; a host not "
                 "in -H runs servers only); default: servers round-robin over the -H hosts");
  app.add_option("--ssh-args", f.ssh_args,
                 "--launcher ssh: extra ssh options, e.g. \"-i key -p 2222\" (before psrun's own "
                 "-o BatchMode=yes ...; ssh takes the first value of an option)");
  app.add_flag("--dry-run", f.dry_run,
               "--launcher ssh: print the placement and, per host, exactly what would be started "
               "(the secret hidden); --launcher mpi or slurm: the mpirun/srun command, the "
               "variables it passes and the rank layout; then exit");
}

std::vector<std::string> split_ssh_args(const std::string& args) {
  std::istringstream in(args);
  std::vector<std::string> out;
  for (std::string w; in >> w;)
    out.push_back(w);
  return out;
}

}  // namespace psrt::psrun
