// toyaccel's C++ kernels: a registered PrivateUse1 kernel written the way vendor plugins write
// theirs, through ATen's C++ API and the dispatcher (no Python on the call path).
//
// aten::atan2 on toyaccel (the declared truth, checked by tests/test_truth_toyaccel.py):
// - float32, float16, bfloat16: computed over the device's own memory (native; toyaccel's device
//   memory is host memory, as for OpenReg, so the kernel views it as host tensors: no copies);
// - float64: the kernel copies its inputs to the host, computes there and copies the result
//   back, like torch_xla's kernels calling at::native::cpu_fallback (host fallback from inside);
// - integer and bool inputs: a clean TORCH_CHECK rejection;
// - an empty input kills the process (SIGSEGV), like torch_xla 2.9's roll of an empty tensor.
#include <ATen/ATen.h>
#include <torch/library.h>

#include <csignal>

namespace {

at::Tensor host_view(const at::Tensor& t) {
  return at::from_blob(t.data_ptr(), t.sizes(), t.strides(),
                       at::TensorOptions().dtype(t.scalar_type()).device(at::kCPU));
}

at::Tensor atan2_kernel(const at::Tensor& self, const at::Tensor& other) {
  if (self.numel() == 0 || other.numel() == 0) {
    std::raise(SIGSEGV);
  }
  TORCH_CHECK(at::isFloatingType(self.scalar_type()) && at::isFloatingType(other.scalar_type()),
              "atan2: ", self.scalar_type(), " inputs are not supported on toyaccel");
  if (self.scalar_type() == at::kDouble || other.scalar_type() == at::kDouble) {
    return at::atan2(self.cpu(), other.cpu()).to(self.device());
  }
  at::Tensor result = at::atan2(host_view(self), host_view(other));
  at::Tensor out = at::empty(result.sizes(), self.options().dtype(result.scalar_type()));
  host_view(out).copy_(result);
  return out;
}

// aten::hypot on toyaccel: float32 only, computed over the device's memory; every other dtype is
// refused by a TORCH_CHECK that names what the kernel supports (as OpenReg's abs does)
at::Tensor hypot_kernel(const at::Tensor& self, const at::Tensor& other) {
  TORCH_CHECK(self.scalar_type() == at::kFloat && other.scalar_type() == at::kFloat,
              "hypot: toyaccel only supports float32, got ", self.scalar_type());
  at::Tensor result = at::hypot(host_view(self), host_view(other));
  at::Tensor out = at::empty(result.sizes(), self.options().dtype(result.scalar_type()));
  host_view(out).copy_(result);
  return out;
}

// aten::copysign on toyaccel: float32 only, like hypot, but refused in the vendor's own words,
// with no phrase of opmatrix's refusal table ("accepts Float, got Double"): what names the
// refusal is the dtype (c10's ScalarType name, as TORCH_CHECK prints it)
at::Tensor copysign_kernel(const at::Tensor& self, const at::Tensor& other) {
  TORCH_CHECK(self.scalar_type() == at::kFloat && other.scalar_type() == at::kFloat,
              "TA_E_DTYPE(0x21): copysign kernel accepts Float, got ", self.scalar_type());
  at::Tensor result = at::copysign(host_view(self), host_view(other));
  at::Tensor out = at::empty(result.sizes(), self.options().dtype(result.scalar_type()));
  host_view(out).copy_(result);
  return out;
}

// aten::leaky_relu on toyaccel: native for every floating dtype; its backward (leaky_relu_backward,
// a structured op) has no toyaccel kernel, so the boxed fallback serves it
at::Tensor leaky_relu_kernel(const at::Tensor& self, const at::Scalar& negative_slope) {
  at::Tensor result = at::leaky_relu(host_view(self), negative_slope);
  at::Tensor out = at::empty(result.sizes(), self.options().dtype(result.scalar_type()));
  host_view(out).copy_(result);
  return out;
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("leaky_relu", &leaky_relu_kernel);
  m.impl("atan2", &atan2_kernel);
  m.impl("hypot", &hypot_kernel);
  m.impl("copysign.Tensor", &copysign_kernel);
}
