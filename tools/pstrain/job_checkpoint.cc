#include "pstrain/job_checkpoint.h"

#include <fmt/format.h>

#include <sstream>

#include "psrt/error.h"

namespace psrt::pstrain {
namespace {

::torch::Tensor text_tensor(const std::string& s) {
  return ::torch::tensor(std::vector<std::int64_t>(s.begin(), s.end()), ::torch::kInt64);
}

std::string tensor_text(const ::torch::Tensor& t) {
  std::string s;
  auto c = t.to(::torch::kCPU).contiguous();
  for (std::int64_t i = 0; i < c.numel(); ++i)
    s.push_back(static_cast<char>(c[i].item<std::int64_t>()));
  return s;
}

}  // namespace

std::vector<std::byte> encode_worker_part(const WorkerPart& part,
                                          const ::torch::nn::Module& model) {
  ::torch::serialize::OutputArchive archive;
  archive.write("step", ::torch::tensor(part.step, ::torch::kInt64));
  archive.write("model", text_tensor(part.model));
  archive.write("dataset", text_tensor(part.dataset));
  archive.write("epoch",
                ::torch::tensor(std::vector<std::int64_t>{part.epoch, part.first_step, part.world},
                                ::torch::kInt64));
  std::vector<std::int64_t> spans;
  for (const auto& span : part.pool) {
    spans.push_back(span.begin);
    spans.push_back(span.end);
  }
  archive.write("epoch_pool", ::torch::tensor(spans, ::torch::kInt64));
  archive.write("rng", ::at::detail::getDefaultCPUGenerator().get_state());
  for (const auto& b : model.named_buffers(/*recurse=*/true))
    archive.write("buffer." + b.key(), b.value().detach().to(::torch::kCPU), /*is_buffer=*/true);
  std::ostringstream out;
  archive.save_to(out);
  const std::string s = out.str();
  const auto* p = reinterpret_cast<const std::byte*>(s.data());
  return {p, p + s.size()};
}

WorkerPart decode_worker_part(const std::vector<std::byte>& bytes, ::torch::nn::Module& model,
                              const std::string& what) {
  WorkerPart part;
  try {
    std::istringstream in(std::string(reinterpret_cast<const char*>(bytes.data()), bytes.size()));
    ::torch::serialize::InputArchive archive;
    archive.load_from(in, ::torch::kCPU);
    // A fresh tensor per read: read() into a defined tensor would resize its storage in place.
    const auto read = [&](const char* key) {
      ::torch::Tensor t;
      archive.read(key, t);
      return t;
    };
    part.step = read("step").item<std::int64_t>();
    part.model = tensor_text(read("model"));
    part.dataset = tensor_text(read("dataset"));
    if (::torch::Tensor cut; archive.try_read("epoch", cut)) {
      if (cut.numel() != 3 || cut[2].item<std::int64_t>() < 1)
        throw Error(ErrorCode::kInvalidArgument, what + ": a bad epoch record");
      part.epoch = cut[0].item<std::int64_t>();
      part.first_step = cut[1].item<std::int64_t>();
      part.world = static_cast<int>(cut[2].item<std::int64_t>());
      const ::torch::Tensor spans = read("epoch_pool").contiguous();
      for (std::int64_t i = 0; i + 1 < spans.numel(); i += 2)
        part.pool.push_back({spans[i].item<std::int64_t>(), spans[i + 1].item<std::int64_t>()});
    }
    ::at::Generator gen = ::at::detail::getDefaultCPUGenerator();  // a handle on the default one
    gen.set_state(read("rng"));
    ::torch::NoGradGuard no_grad;
    for (auto& b : model.named_buffers(/*recurse=*/true)) {
      ::torch::Tensor saved;
      archive.read("buffer." + b.key(), saved, /*is_buffer=*/true);
      b.value().copy_(saved);
    }
  } catch (const c10::Error& e) {
    throw Error(ErrorCode::kInvalidArgument,
                fmt::format("{} is not a pstrain worker part of this model: {}", what,
                            e.what_without_backtrace()));
  }
  return part;
}

}  // namespace psrt::pstrain
