// pstrain as users run it: real psrun jobs on 127.0.0.1 with the synthetic data set, checked
// through the metrics files (per-step loss and weights digest), checkpoints and summary lines.
// GpuTrainJob.* (ctest label gpu) train on CUDA; they run only where pstrain is built against a
// CUDA LibTorch and a GPU is visible, and skip saying why elsewhere (Debian's libtorch-dev is
// CPU-only).
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "psrt/error.h"
#include "pstrain/checkpoint.h"
#include "pstrain/device.h"
#include "pstrain/job_checkpoint.h"
#include "pstrain/models/model.h"

namespace {

namespace fs = std::filesystem;
using nlohmann::json;

struct Run {
  int rc = -1;
  std::string out;
  bool has(const std::string& s) const { return out.find(s) != std::string::npos; }
};

fs::path scratch(const std::string& name) {
  auto p = fs::temp_directory_path() / ("psrt_train_test_" + std::to_string(::getpid())) / name;
  fs::remove_all(p);
  fs::create_directories(p);
  return p;
}

Run sh(const std::string& cmd) {
  const auto log = scratch("log") / "out.txt";
  const int status = std::system((cmd + " > " + log.string() + " 2>&1").c_str());
  Run r;
  r.rc = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  std::ifstream in(log);
  std::stringstream ss;
  ss << in.rdbuf();
  r.out = ss.str();
  return r;
}

std::vector<json> steps_of(const fs::path& metrics) {
  std::vector<json> steps;
  std::ifstream in(metrics);
  for (std::string line; std::getline(in, line);) {
    auto j = json::parse(line);
    if (j.contains("loss")) steps.push_back(j);
  }
  return steps;
}

// The 60-step metrics of two sync workers (m0.jsonl, m1.jsonl in `dir`): every step numbered,
// both workers' weights bit-identical after each one and changing, and the mean loss of the last
// 10 steps below 0.7 x that of the first 10.
void expect_identical_steps_and_falling_loss(const fs::path& dir) {
  auto w0 = steps_of(dir / "m0.jsonl"), w1 = steps_of(dir / "m1.jsonl");
  ASSERT_EQ(w0.size(), 60u);
  ASSERT_EQ(w1.size(), 60u);
  for (std::size_t i = 0; i < w0.size(); ++i) {
    EXPECT_EQ(w0[i]["step"], static_cast<int>(i + 1));
    EXPECT_EQ(w0[i]["weights_digest"], w1[i]["weights_digest"]) << "step " << i + 1;
  }
  EXPECT_NE(w0.front()["weights_digest"], w0.back()["weights_digest"]);
  double first = 0, last = 0;
  for (int i = 0; i < 10; ++i) {
    first += w0[i]["loss"].get<double>() + w1[i]["loss"].get<double>();
    last += w0[50 + i]["loss"].get<double>() + w1[50 + i]["loss"].get<double>();
  }
  EXPECT_LT(last, 0.7 * first) << "mean loss of the first 10 steps " << first / 20
                               << ", of the last 10 " << last / 20;
}

json summary_of(const Run& r) {
  for (auto p = r.out.find("{\"dataset\""); p != std::string::npos;
       p = r.out.find("{\"dataset\"", p + 1))
    return json::parse(r.out.substr(p, r.out.find('\n', p) - p));
  return {};
}

// Why pstrain cannot train on CUDA here; empty when it can.
std::string no_cuda_reason() {
  if (!psrt::pstrain::libtorch_has_cuda())
    return "pstrain's LibTorch has no CUDA (Debian's libtorch-dev is CPU-only): configure with "
           "a CUDA LibTorch (-DTorch_DIR=...) to run the GPU training tests";
  if (!::torch::cuda::is_available()) return "LibTorch sees no CUDA device";
  return "";
}

// Small and fast: LeNet on the synthetic set, one intra-op thread (deterministic).
const std::string kTrain =
    " " PSTRAIN_PATH " --model lenet --dataset synthetic --threads 1 --batch-size 32 ";

TEST(TrainJob, TwoSyncWorkersHoldBitIdenticalWeightsAfterEveryStepAndLossFalls) {
  auto dir = scratch("sync2");
  auto r = sh(PSRUN_PATH " --transport tcp -n 2 --" + kTrain +
              "--lr 0.05 --lr-schedule none --max-steps 60 --digest --metrics " +
              (dir / "m{rank}.jsonl").string());
  ASSERT_EQ(r.rc, 0) << r.out;
  expect_identical_steps_and_falling_loss(dir);
  auto s = summary_of(r);
  ASSERT_FALSE(s.is_null()) << r.out;
  EXPECT_EQ(s["workers"], 2);
  EXPECT_EQ(s["steps"], 60);
  EXPECT_EQ(s["device"], "cpu");
  EXPECT_GT(s["test_accuracy"].get<double>(), 0.5);  // 10 classes: chance is 0.1
}

TEST(TrainJob, OneGradientInFlightAtATimeNeitherDeadlocksNorChangesTheResult) {
  // A 1-byte credit queues every gradient behind the previous one's send, in forward order, on
  // both workers at once; bf16 gradients go as PUSH + PULL. Sync rounds still complete and
  // both workers hold identical weights at every step.
  for (const char* dtype : {"fp32", "bf16"}) {
    auto dir = scratch(std::string("credit_") + dtype);
    auto r = sh(PSRUN_PATH " --transport ucx -n 2 --" + kTrain +
                "--max-steps 30 --push-credit 1 --digest --grad-dtype " + dtype + " --metrics " +
                (dir / "m{rank}.jsonl").string());
    ASSERT_EQ(r.rc, 0) << r.out;
    auto w0 = steps_of(dir / "m0.jsonl"), w1 = steps_of(dir / "m1.jsonl");
    ASSERT_EQ(w0.size(), 30u);
    ASSERT_EQ(w1.size(), 30u);
    for (std::size_t i = 0; i < w0.size(); ++i)
      EXPECT_EQ(w0[i]["weights_digest"], w1[i]["weights_digest"]) << dtype << " step " << i + 1;
    EXPECT_NE(w0.front()["weights_digest"], w0.back()["weights_digest"]) << dtype;
  }
}

// One worker through the servers against --no-ps (LibTorch's optimizer in the process), step for
// step: the loss of every step within `loss_tol` relative, the final weights close.
void expect_ps_matches_local(const std::string& name, const std::string& flags, double loss_tol) {
  auto a = scratch(name + "_ps"), b = scratch(name + "_local");
  auto ps = sh(PSRUN_PATH " --transport tcp -n 1 --" + kTrain + flags + "--metrics " +
               (a / "m.jsonl").string() + " --train-dir " + a.string());
  ASSERT_EQ(ps.rc, 0) << ps.out;
  auto local = sh(kTrain + "--no-ps " + flags + "--metrics " + (b / "m.jsonl").string() +
                  " --train-dir " + b.string());
  ASSERT_EQ(local.rc, 0) << local.out;
  auto sa = steps_of(a / "m.jsonl"), sb = steps_of(b / "m.jsonl");
  ASSERT_EQ(sa.size(), 40u);
  ASSERT_EQ(sb.size(), 40u);
  for (std::size_t i = 0; i < sa.size(); ++i) {
    EXPECT_FLOAT_EQ(sa[i]["lr"].get<float>(), sb[i]["lr"].get<float>());
    const double la = sa[i]["loss"], lb = sb[i]["loss"];
    // Last-bit differences only (ATen fuses multiply-adds, the servers do not). A step that
    // used the previous step's learning rate shows as 1e-5 and more within 10 steps.
    EXPECT_NEAR(la, lb, loss_tol * std::abs(lb)) << "step " << i + 1;
  }
  // The final weights, element by element.
  auto ca = psrt::pstrain::latest_checkpoint(a.string());
  auto cb = psrt::pstrain::latest_checkpoint(b.string());
  ASSERT_TRUE(ca && cb);
  auto ma = psrt::pstrain::make_model("lenet", ca->spec);
  auto mb = psrt::pstrain::make_model("lenet", cb->spec);
  psrt::pstrain::load_checkpoint(*ca, *ma, nullptr);
  psrt::pstrain::load_checkpoint(*cb, *mb, nullptr);
  auto pa = ma->named_parameters(), pb = mb->named_parameters();
  ASSERT_EQ(pa.size(), pb.size());
  for (const auto& item : pa) {
    const auto& x = item.value();
    const auto& y = pb[item.key()];
    EXPECT_TRUE(::torch::allclose(x, y, 1e-4, 1e-6))
        << item.key() << ": max difference " << (x - y).abs().max().item<float>();
  }
}

TEST(TrainJob, OnePsWorkerMatchesTorchSgdStepForStep) {
  // Momentum, Nesterov, weight decay and a cosine schedule (set per push on the servers).
  expect_ps_matches_local("equiv",
                          "--lr 0.05 --momentum 0.9 --nesterov --weight-decay 0.001 "
                          "--lr-schedule cosine --max-steps 40 --checkpoint-every 40 ",
                          2e-6);
}

TEST(TrainJob, OnePsWorkerMatchesTorchAdamWStepForStep) {
  // AdamW on the servers (kernels/fused_adam.h) against LibTorch's AdamW with the same fp32
  // hyper-parameters, decoupled weight decay and a cosine schedule; ATen fuses multiply-adds
  // the servers do not.
  expect_ps_matches_local("adamw",
                          "--optimizer adamw --lr 0.002 --betas 0.9,0.999 --eps 1e-8 "
                          "--weight-decay 0.01 --lr-schedule cosine --max-steps 40 "
                          "--checkpoint-every 40 ",
                          2e-5);
}

std::string slurp(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// The pid of the psrun (not one of its servers) whose command line mentions `marker`, or 0.
pid_t find_psrun(const std::string& marker) {
  for (const auto& e : fs::directory_iterator("/proc")) {
    const std::string name = e.path().filename().string();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    const std::string cmd = slurp((e.path() / "cmdline").string());
    if (cmd.rfind(PSRUN_PATH, 0) == 0 && cmd.find(marker) != std::string::npos)
      return static_cast<pid_t>(std::stol(name));
  }
  return 0;
}

// The pid of the pstrain process whose command line mentions `marker`, or 0.
pid_t find_pstrain(const std::string& marker) {
  for (const auto& e : fs::directory_iterator("/proc")) {
    const std::string name = e.path().filename().string();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::ifstream in(e.path() / "cmdline");
    std::string cmd((std::istreambuf_iterator<char>(in)), {});
    if (cmd.find("pstrain") != std::string::npos && cmd.find(marker) != std::string::npos &&
        cmd.find("psrun") == std::string::npos)
      return static_cast<pid_t>(std::stol(name));
  }
  return 0;
}

// The latest round of `dir` that a job checkpoint declared complete (r<round>/JOB), or -1.
int latest_job_round(const fs::path& dir) {
  int latest = -1;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    if (name.size() == 13 && name[0] == 'r' && fs::exists(e.path() / "JOB"))
      latest = std::max(latest, std::stoi(name.substr(1)));
  }
  return latest;
}

// A worker part keeps its epoch's cut (psrun --min-workers cuts the rest of the epoch from it);
// a part written before pstrain kept it reads as world 0 (every epoch cut for the workers of the
// start, as then).
TEST(WorkerPart, KeepsTheEpochCutAndReadsAPartWithoutOne) {
  auto model = psrt::pstrain::make_model("lenet", {});
  const psrt::pstrain::WorkerPart part{25, "lenet", "synthetic", 3, 20, 2, {{5, 9}, {12, 40}}};
  const auto back =
      psrt::pstrain::decode_worker_part(encode_worker_part(part, *model), *model, "w0.part");
  EXPECT_EQ(back.step, 25);
  EXPECT_EQ(back.model, "lenet");
  EXPECT_EQ(back.dataset, "synthetic");
  EXPECT_EQ(back.epoch, 3);
  EXPECT_EQ(back.first_step, 20);
  EXPECT_EQ(back.world, 2);
  EXPECT_EQ(back.pool, (psrt::pstrain::EpochPool{{5, 9}, {12, 40}}));

  ::torch::serialize::OutputArchive old;  // the fields of a part before the epoch cut
  old.write("step", ::torch::tensor(std::int64_t{7}, ::torch::kInt64));
  old.write("model", ::torch::tensor(std::vector<std::int64_t>{'l', 'e', 'n', 'e', 't'}));
  old.write("dataset", ::torch::tensor(std::vector<std::int64_t>{'s'}));
  old.write("rng", ::at::detail::getDefaultCPUGenerator().get_state());
  for (const auto& b : model->named_buffers(/*recurse=*/true))
    old.write("buffer." + b.key(), b.value(), /*is_buffer=*/true);
  std::ostringstream out;
  old.save_to(out);
  const std::string bytes = out.str();
  const auto* p = reinterpret_cast<const std::byte*>(bytes.data());
  const auto read = psrt::pstrain::decode_worker_part({p, p + bytes.size()}, *model, "old.part");
  EXPECT_EQ(read.step, 7);
  EXPECT_EQ(read.model, "lenet");
  EXPECT_EQ(read.world, 0);
  EXPECT_TRUE(read.pool.empty());
}

TEST(TrainJob, KilledWorkerResumesFromTheJobCheckpointBitForBitWithMomentum) {
  // Momentum 0.9 and the cosine schedule: the servers restore their slices with momentum at the
  // job checkpoint's round and the worker its step (data position, schedule) and buffers, so the
  // resumed run must retrace the uninterrupted one bit for bit. The round resumed from is one
  // asked for on demand (SIGUSR1 to psrun), between two rounds of the cadence.
  const std::string flags =
      "--lr 0.05 --momentum 0.9 --epochs 3 --max-steps 300 --checkpoint-every 50 "
      "--digest ";
  auto ref = scratch("ref"), killed = scratch("killed");
  const auto job = [](const fs::path& dir) {
    return std::string(PSRUN_PATH) + " --transport tcp -n 1 --checkpoint-every 50 " +
           "--checkpoint-dir " + (dir / "job").string() + " --";
  };
  auto full = sh(job(ref) + kTrain + flags + "--metrics " + (ref / "m.jsonl").string() +
                 " --train-dir " + ref.string());
  ASSERT_EQ(full.rc, 0) << full.out;
  EXPECT_EQ(latest_job_round(ref / "job"), 300);

  // The same job, SIGKILLed once it is past step 120.
  const std::string log = (killed / "first.txt").string();
  const std::string cmd = job(killed) + kTrain + flags + "--metrics " +
                          (killed / "m1.jsonl").string() + " --train-dir " + killed.string() +
                          " > " + log + " 2>&1";
  pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    ::execl("/bin/sh", "sh", "-c", cmd.c_str(), static_cast<char*>(nullptr));
    ::_exit(127);
  }
  // Past step 110, SIGUSR1 to psrun asks for a checkpoint on demand (round step + 2, off the
  // cadence of 50); once that round is complete the worker is SIGKILLed.
  bool asked = false, killed_it = false;
  for (int i = 0; i < 3000 && !killed_it; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    auto s = steps_of(killed / "m1.jsonl");
    if (s.empty() || s.back()["step"].get<int>() < 110) continue;
    if (!asked) {
      if (pid_t p = find_psrun(killed.string())) asked = ::kill(p, SIGUSR1) == 0;
    } else if (latest_job_round(killed / "job") % 50 != 0) {
      if (pid_t p = find_pstrain(killed.string())) killed_it = ::kill(p, SIGKILL) == 0;
    }
  }
  int status = 0;
  ::waitpid(pid, &status, 0);
  ASSERT_TRUE(asked) << "never saw step 110";
  ASSERT_TRUE(killed_it) << "no checkpoint on demand\n" << slurp(log);
  EXPECT_NE(WEXITSTATUS(status), 0) << "psrun must report the killed worker";
  auto first = steps_of(killed / "m1.jsonl");
  ASSERT_LT(first.back()["step"].get<int>(), 300);
  const int round = latest_job_round(killed / "job");
  ASSERT_GT(round, 110);
  EXPECT_NE(round % 50, 0) << "the round asked for on demand";
  EXPECT_NE(slurp(log).find("psrun: got SIGUSR1: asked the job for a checkpoint at its next round"),
            std::string::npos);
  EXPECT_NE(slurp(log).find("job checkpoint requested at round " + std::to_string(round)),
            std::string::npos);
  auto ck = psrt::pstrain::latest_checkpoint(killed.string());
  ASSERT_TRUE(ck);
  EXPECT_EQ(ck->digest, first[ck->step - 1]["weights_digest"]);

  auto resumed = sh(job(killed) + kTrain + flags + "--resume " + "--metrics " +
                    (killed / "m2.jsonl").string() + " --train-dir " + killed.string());
  ASSERT_EQ(resumed.rc, 0) << resumed.out;
  EXPECT_TRUE(resumed.has("resumed from job checkpoint round " + std::to_string(round) + " in " +
                          (killed / "job").string() + " at step " + std::to_string(round)))
      << resumed.out;
  EXPECT_TRUE(resumed.has("weights " + first[round - 1]["weights_digest"].get<std::string>()))
      << resumed.out;
  auto second = steps_of(killed / "m2.jsonl");
  auto reference = steps_of(ref / "m.jsonl");
  ASSERT_EQ(second.size(), static_cast<std::size_t>(300 - round));
  EXPECT_EQ(second.front()["step"], round + 1);
  for (const auto& s : second) {
    const int step = s["step"];
    EXPECT_EQ(s["weights_digest"], reference[step - 1]["weights_digest"]) << "step " << step;
  }

  // pseval evaluates every checkpoint of the reference run; the last one is the final model.
  auto ev = sh(PSEVAL_PATH " --train-dir " + ref.string());
  ASSERT_EQ(ev.rc, 0) << ev.out;
  std::vector<json> lines;
  std::istringstream in(ev.out);
  for (std::string line; std::getline(in, line);)
    if (!line.empty() && line[0] == '{') lines.push_back(json::parse(line));
  const auto written = psrt::pstrain::list_checkpoints(ref.string());
  ASSERT_EQ(lines.size(), written.size()) << ev.out;
  for (std::size_t i = 0; i < lines.size(); ++i) {
    EXPECT_EQ(lines[i]["step"], written[i].step);
    EXPECT_EQ(lines[i]["digest"], reference[written[i].step - 1]["weights_digest"]);
  }
  EXPECT_EQ(lines.back()["step"], 300);
  EXPECT_DOUBLE_EQ(lines.back()["test_accuracy"].get<double>(),
                   summary_of(full)["test_accuracy"].get<double>());
}

TEST(TrainJob, PsrunWithoutCommandTrainsTheDefaultJob) {
  if (!fs::exists("/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz"))
    GTEST_SKIP() << "Fashion-MNIST is not installed (apt-get install dataset-fashion-mnist)";
  // psrun finds pstrain next to itself: 2 workers, LeNet, Fashion-MNIST, 1 epoch.
  auto r = sh(PSRUN_PATH " --transport tcp");
  ASSERT_EQ(r.rc, 0) << r.out;
  EXPECT_TRUE(r.has("running the default job, 2 workers")) << r.out;
  auto s = summary_of(r);
  ASSERT_FALSE(s.is_null()) << r.out;
  EXPECT_EQ(s["model"], "lenet");
  EXPECT_EQ(s["dataset"], "fashion-mnist");
  EXPECT_EQ(s["workers"], 2);
  EXPECT_EQ(s["steps"], 60000 / 2 / 16);
  EXPECT_GT(s["test_accuracy"].get<double>(), 0.80) << r.out;
}

TEST(TrainJob, BadCommandLinesAndMissingDataAreRefusedWithTheCause) {
  auto missing = sh(PSTRAIN_PATH " --no-ps --dataset fashion-mnist --data-dir /nonexistent/fm");
  EXPECT_EQ(missing.rc, 2) << missing.out;
  EXPECT_TRUE(missing.has("/nonexistent/fm")) << missing.out;
  EXPECT_TRUE(missing.has("dataset-fashion-mnist")) << missing.out;

  auto model = sh(PSTRAIN_PATH " --no-ps --dataset synthetic --model vgg16");
  EXPECT_EQ(model.rc, 2) << model.out;
  EXPECT_TRUE(model.has("vgg16") && model.has("resnet18") && model.has("lenet")) << model.out;

  auto resume = sh(PSTRAIN_PATH " --no-ps --dataset synthetic --resume");
  EXPECT_EQ(resume.rc, 2) << resume.out;
  EXPECT_TRUE(resume.has("--resume needs --train-dir")) << resume.out;

  // Worded as psrun words --server-device's error.
  for (const char* device : {"gpu", "cuda:x", "cuda:-1"}) {
    auto bad = sh(PSTRAIN_PATH " --no-ps --dataset synthetic --device " + std::string(device));
    EXPECT_EQ(bad.rc, 2) << bad.out;
    EXPECT_TRUE(bad.has(std::string("--device: unknown device '") + device +
                        "': use cpu, cuda (device 0) or cuda:N"))
        << bad.out;
  }

  auto dtype = sh(PSTRAIN_PATH " --dataset synthetic --grad-dtype fp8");
  EXPECT_EQ(dtype.rc, 2) << dtype.out;
  EXPECT_TRUE(dtype.has("--grad-dtype 'fp8'")) << dtype.out;

  auto outside = sh(PSTRAIN_PATH " --dataset synthetic --max-steps 1");
  EXPECT_NE(outside.rc, 0) << outside.out;
  EXPECT_TRUE(outside.has("PSRT_"))
      << "run outside psrun must name the missing variable: " << outside.out;

  auto eval = sh(PSEVAL_PATH " --train-dir /nonexistent/run");
  EXPECT_EQ(eval.rc, 2) << eval.out;
  EXPECT_TRUE(eval.has("/nonexistent/run")) << eval.out;

  // A train dir with checkpoints: not overwritten without --resume; resumed only as written.
  auto dir = scratch("reuse");
  const std::string base = PSTRAIN_PATH
                           " --no-ps --dataset synthetic --threads 1 --max-steps 2 "
                           "--train-dir " +
                           dir.string();
  const std::string run = base + " --batch-size 32";
  ASSERT_EQ(sh(run).rc, 0);
  auto again = sh(run);
  EXPECT_EQ(again.rc, 2) << again.out;
  EXPECT_TRUE(again.has("holds the checkpoints of an earlier run (latest: step 2)")) << again.out;
  auto other_batch = sh(base + " --resume --batch-size 64");
  EXPECT_EQ(other_batch.rc, 2) << other_batch.out;
  EXPECT_TRUE(other_batch.has("--batch-size 32, this run has 1 and 64")) << other_batch.out;

  // A checkpoint description pstrain did not write: pseval names it instead of crashing.
  std::ofstream(dir / "ckpt-00000009.json") << R"({"step":"nine","spec":[1,28,28,10]})";
  auto corrupt = sh(PSEVAL_PATH " --train-dir " + dir.string());
  EXPECT_EQ(corrupt.rc, 2) << corrupt.out;
  EXPECT_TRUE(corrupt.has("ckpt-00000009.json is not one pstrain wrote")) << corrupt.out;
}

// --device cuda on a node of several GPUs: each worker its placement's GPU (issue 22's bug: every
// worker landed on cuda:0). Decided by environment, so it is checked without a GPU.
TEST(TrainDevice, CudaMeansThePlacementsGpuElseTheLocalRankNeverSilentlyZero) {
  using psrt::pstrain::rank_gpu;
  EXPECT_EQ(rank_gpu(4, "2", "1"), 2);      // psrun's placement wins
  EXPECT_EQ(rank_gpu(4, nullptr, "1"), 1);  // else the worker-local rank
  EXPECT_EQ(rank_gpu(4, "", "5"), 1);       // 6 workers over 4 GPUs: 5 mod 4
  EXPECT_EQ(rank_gpu(4, nullptr, nullptr), 0);
  EXPECT_EQ(rank_gpu(1, nullptr, "3"), 0);
  try {
    rank_gpu(2, "3", "0");
    ADD_FAILURE() << "PSRT_GPU past the visible devices was accepted";
  } catch (const psrt::Error& e) {
    EXPECT_NE(std::string(e.what()).find("PSRT_GPU=3, but this process sees 2 CUDA devices"),
              std::string::npos)
        << e.what();
  }
  EXPECT_THROW(rank_gpu(2, "x", nullptr), psrt::Error);
  EXPECT_THROW(rank_gpu(2, nullptr, "-1"), psrt::Error);
}

TEST(TrainJob, CudaDeviceWithoutUsableCudaIsRefusedNamingTheCauseBeforeJoining) {
  const std::string why = no_cuda_reason();
  if (why.empty()) GTEST_SKIP() << "CUDA is usable here (GpuTrainJob.* train on it)";
  const std::string cause = psrt::pstrain::libtorch_has_cuda()
                                ? "LibTorch sees no CUDA device"
                                : "this LibTorch has no CUDA (Debian's libtorch-dev is CPU-only";
  // `timeout` bounds every run: a worker stuck joining would show as 124.
  auto alone = sh("timeout 60 " PSTRAIN_PATH " --no-ps --dataset synthetic --device cuda");
  EXPECT_EQ(alone.rc, 1) << alone.out;
  EXPECT_TRUE(alone.has("pstrain: error: --device cuda: " + cause)) << alone.out;

  // Under psrun every worker fails before joining the job; the job ends at once, non-zero.
  const auto start = std::chrono::steady_clock::now();
  auto job = sh("timeout 120 " PSRUN_PATH " --transport tcp -n 2 --" + kTrain +
                "--device cuda:1 --max-steps 5");
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_NE(job.rc, 0) << job.out;
  EXPECT_NE(job.rc, 124) << "the job hung: " << job.out;
  EXPECT_LT(seconds, 60) << job.out;
  EXPECT_TRUE(job.has("--device cuda:1: " + cause)) << job.out;
  EXPECT_FALSE(job.has("training lenet")) << "a worker trained: " << job.out;
}

// ---- GPU: these run only with a CUDA LibTorch and a visible GPU (ctest -L gpu) ----

TEST(GpuTrainJob, TwoSyncCudaWorkersWithACudaServerHoldBitIdenticalWeightsAndLossFalls) {
  if (auto why = no_cuda_reason(); !why.empty()) GTEST_SKIP() << why;
  auto dir = scratch("gpu_sync2");
  // tcp carries no CUDA memory: each worker takes path b (CUDA IPC) to the CUDA server.
  auto r = sh("timeout 280 " PSRUN_PATH " --transport tcp -n 2 --server-device cuda --" + kTrain +
              "--device cuda --lr 0.05 --lr-schedule none --max-steps 60 --digest --metrics " +
              (dir / "m{rank}.jsonl").string());
  ASSERT_EQ(r.rc, 0) << r.out;
  EXPECT_TRUE(r.has("CUDA memory takes path b")) << r.out;
  expect_identical_steps_and_falling_loss(dir);
  auto s = summary_of(r);
  ASSERT_FALSE(s.is_null()) << r.out;
  EXPECT_EQ(s["device"], "cuda:0");
  EXPECT_EQ(s["steps"], 60);
  EXPECT_GT(s["test_accuracy"].get<double>(), 0.5);
}

TEST(GpuTrainJob, CheckpointsMoveBetweenCudaAndCpuRunsWithTheirWeights) {
  if (auto why = no_cuda_reason(); !why.empty()) GTEST_SKIP() << why;
  // Momentum 0 and a constant rate: nothing but the weights carries over. CUDA convolutions are
  // not bit-identical to the CPU's, so the runs are compared through their checkpoints.
  auto dir = scratch("gpu_ckpt");
  const std::string flags =
      "--lr 0.05 --momentum 0 --lr-schedule none --checkpoint-every 20 "
      "--digest --train-dir " +
      dir.string() + " ";
  auto job = [&](const std::string& device, int steps, const std::string& metrics) {
    const std::string server = device == "cpu" ? "" : "--server-device cuda ";
    return sh("timeout 280 " PSRUN_PATH " --transport tcp -n 1 " + server + "--" + kTrain + flags +
              "--device " + device + " --max-steps " + std::to_string(steps) + " --metrics " +
              (dir / metrics).string() + (steps > 20 ? " --resume" : ""));
  };
  auto on_cuda = job("cuda", 20, "m1.jsonl");
  ASSERT_EQ(on_cuda.rc, 0) << on_cuda.out;
  auto m1 = steps_of(dir / "m1.jsonl");
  ASSERT_EQ(m1.size(), 20u);
  auto ck = psrt::pstrain::latest_checkpoint(dir.string());
  ASSERT_TRUE(ck);
  ASSERT_EQ(ck->step, 20);
  EXPECT_EQ(ck->digest, m1.back()["weights_digest"]);

  // cuda -> cpu, then cpu -> cuda: each resumes at the checkpoint's step with its weights.
  auto on_cpu = job("cpu", 40, "m2.jsonl");
  ASSERT_EQ(on_cpu.rc, 0) << on_cpu.out;
  EXPECT_TRUE(on_cpu.has("at step 20 (epoch")) << on_cpu.out;
  EXPECT_TRUE(on_cpu.has("weights " + ck->digest)) << on_cpu.out;
  auto m2 = steps_of(dir / "m2.jsonl");
  ASSERT_EQ(m2.size(), 20u);
  EXPECT_EQ(m2.front()["step"], 21);
  auto ck2 = psrt::pstrain::latest_checkpoint(dir.string());
  ASSERT_TRUE(ck2);
  ASSERT_EQ(ck2->step, 40);
  EXPECT_EQ(ck2->digest, m2.back()["weights_digest"]);

  auto back = job("cuda", 60, "m3.jsonl");
  ASSERT_EQ(back.rc, 0) << back.out;
  EXPECT_TRUE(back.has("at step 40 (epoch")) << back.out;
  EXPECT_TRUE(back.has("weights " + ck2->digest)) << back.out;
  auto m3 = steps_of(dir / "m3.jsonl");
  ASSERT_EQ(m3.size(), 20u);
  EXPECT_LT(m3.back()["loss"].get<double>() + m3[18]["loss"].get<double>(),
            0.7 * (m1[0]["loss"].get<double>() + m1[1]["loss"].get<double>()));

  // pseval evaluates the checkpoints of both devices on the CPU.
  auto ev = sh("timeout 120 " PSEVAL_PATH " --train-dir " + dir.string());
  ASSERT_EQ(ev.rc, 0) << ev.out;
  std::vector<json> lines;
  std::istringstream in(ev.out);
  for (std::string line; std::getline(in, line);)
    if (!line.empty() && line[0] == '{') lines.push_back(json::parse(line));
  ASSERT_EQ(lines.size(), 3u) << ev.out;
  EXPECT_EQ(lines[0]["digest"], ck->digest);
  EXPECT_EQ(lines[1]["digest"], ck2->digest);
  EXPECT_EQ(lines[2]["step"], 60);
  // The same weights evaluated on the GPU (pstrain) and on the CPU (pseval): a sample or two
  // may flip where the logits nearly tie.
  auto s = summary_of(back);
  ASSERT_FALSE(s.is_null()) << back.out;
  EXPECT_NEAR(lines[2]["test_accuracy"].get<double>(), s["test_accuracy"].get<double>(), 0.01);
  EXPECT_GT(lines[2]["test_accuracy"].get<double>(), 0.5);
}

TEST(GpuTrainJob, NoPsTrainsWithTorchSgdOnTheGpuAndResumesOnTheCpu) {
  if (auto why = no_cuda_reason(); !why.empty()) GTEST_SKIP() << why;
  const std::string flags = "--no-ps --lr 0.05 --momentum 0.9 --lr-schedule none --max-steps 60 ";
  auto cpu_dir = scratch("gpu_nops_cpu"), dir = scratch("gpu_nops");
  auto cpu = sh("timeout 280" + kTrain + flags + "--device cpu --metrics " +
                (cpu_dir / "m.jsonl").string());
  ASSERT_EQ(cpu.rc, 0) << cpu.out;
  auto gpu = sh("timeout 280" + kTrain + flags + "--device cuda --digest --checkpoint-every 30 " +
                "--metrics " + (dir / "m.jsonl").string() + " --train-dir " + dir.string());
  ASSERT_EQ(gpu.rc, 0) << gpu.out;
  auto sc = steps_of(cpu_dir / "m.jsonl"), sg = steps_of(dir / "m.jsonl");
  ASSERT_EQ(sc.size(), 60u);
  ASSERT_EQ(sg.size(), 60u);
  // Step 1: the same initial weights (initialised on the CPU) and the same batch; only the
  // arithmetic differs (TF32 convolutions by default on Ampere and later).
  EXPECT_NEAR(sg[0]["loss"].get<double>(), sc[0]["loss"].get<double>(),
              1e-2 * sc[0]["loss"].get<double>());
  double first = 0, last = 0;
  for (int i = 0; i < 10; ++i) {
    first += sg[i]["loss"].get<double>();
    last += sg[50 + i]["loss"].get<double>();
  }
  EXPECT_LT(last, 0.7 * first);
  auto s = summary_of(gpu);
  ASSERT_FALSE(s.is_null()) << gpu.out;
  EXPECT_EQ(s["device"], "cuda:0");
  EXPECT_EQ(s["ps"], false);
  EXPECT_GT(s["test_accuracy"].get<double>(), 0.5);

  // The momentum buffers were saved from the GPU: the CPU run loads them with the weights.
  auto ck = psrt::pstrain::latest_checkpoint(dir.string());
  ASSERT_TRUE(ck);
  ASSERT_EQ(ck->step, 60);
  auto resumed = sh("timeout 280" + kTrain + "--no-ps --lr 0.05 --momentum 0.9 --lr-schedule " +
                    "none --max-steps 70 --device cpu --resume --train-dir " + dir.string());
  ASSERT_EQ(resumed.rc, 0) << resumed.out;
  EXPECT_TRUE(resumed.has("weights " + ck->digest)) << resumed.out;
  auto rs = summary_of(resumed);
  ASSERT_FALSE(rs.is_null()) << resumed.out;
  EXPECT_EQ(rs["steps"], 70);
  EXPECT_GT(rs["test_accuracy"].get<double>(), 0.5);
}

}  // namespace
