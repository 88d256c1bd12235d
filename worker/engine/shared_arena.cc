#include "worker/engine/shared_arena.h"

#include "common/status_macros.h"
#include "worker/engine/candidate_loader.h"

namespace pkb {

SharedArena::~SharedArena() {
  if (id_ >= 0) host_->Unmap(id_);
  if (segment_.base) dev_->FreeShared(segment_);
}

size_t SharedArena::Footprint(at::IntArrayRef sizes, at::IntArrayRef strides, size_t item) {
  size_t extent = 1;
  for (size_t i = 0; i < sizes.size(); ++i) {
    if (sizes[i] == 0) return 0;
    extent += static_cast<size_t>(sizes[i] - 1) * static_cast<size_t>(strides[i]);
  }
  return (extent * item + 255) / 256 * 256;
}

size_t SharedArena::BytesFor(const Inputs& in, const std::vector<OutputDecl>& outs) {
  size_t bytes = 0;
  for (const auto& t : in.tensors) bytes += Footprint(t.sizes(), t.strides(), t.element_size());
  for (const auto& d : outs) {
    bytes += Footprint(d.shape, c10::contiguous_strides(d.shape), c10::elementSize(d.dtype));
  }
  return bytes;
}

absl::Status SharedArena::Reserve(size_t bytes) {
  PKB_ASSIGN_OR_RETURN(segment_, dev_->AllocShared(bytes));
  if (host_->running()) {
    PKB_ASSIGN_OR_RETURN(id_, host_->Map(segment_));
  }
  return absl::OkStatus();
}

absl::StatusOr<at::Tensor> SharedArena::Place(const at::Tensor& src) {
  PKB_ASSIGN_OR_RETURN(at::Tensor view,
                       View(src.sizes(), src.strides(), src.scalar_type(), src.device()));
  view.copy_(src);
  return view;
}

absl::StatusOr<at::Tensor> SharedArena::Empty(at::IntArrayRef shape, at::ScalarType dtype,
                                              at::Device device) {
  return View(shape, c10::contiguous_strides(shape), dtype, device);
}

absl::StatusOr<std::pair<Inputs, OutputSet>> SharedArena::PlaceSet(
    const Inputs& drawn, const std::vector<OutputDecl>& outs, at::Device device, bool copy) {
  Inputs in;
  for (size_t i = 0; i < drawn.tensors.size(); ++i) {
    const at::Tensor& src = drawn.tensors[i];
    at::Tensor t;
    if (copy) {
      PKB_ASSIGN_OR_RETURN(t, Place(src));
    } else {
      PKB_ASSIGN_OR_RETURN(t, View(src.sizes(), src.strides(), src.scalar_type(), src.device()));
    }
    in.Add(drawn.names[i], t);
  }
  in.scalars = drawn.scalars;
  OutputSet o;
  for (const auto& d : outs) {
    PKB_ASSIGN_OR_RETURN(at::Tensor t, Empty(d.shape, d.dtype, device));
    o.tensors.push_back(t);
  }
  return std::make_pair(std::move(in), std::move(o));
}

absl::StatusOr<v1::HostCall> SharedArena::Describe(const Inputs& in, const OutputSet& out) const {
  v1::HostCall call;
  for (const auto& t : in.tensors) PKB_RETURN_IF_ERROR(Describe(t, call.add_inputs()));
  for (const auto& t : out.tensors) PKB_RETURN_IF_ERROR(Describe(t, call.add_outputs()));
  for (const auto& s : in.scalars) {
    auto* x = call.add_scalars();
    x->set_name(s.name);
    x->set_is_int(s.is_int);
    x->set_i(s.i);
    x->set_f(s.f);
  }
  return call;
}

absl::StatusOr<at::Tensor> SharedArena::View(at::IntArrayRef shape, at::IntArrayRef strides,
                                             at::ScalarType dtype, at::Device device) {
  const size_t bytes = Footprint(shape, strides, c10::elementSize(dtype));
  if (used_ + bytes > segment_.bytes) return absl::InternalError("shared arena too small");
  void* p = static_cast<char*>(segment_.base) + used_;
  used_ += bytes;
  return at::from_blob(
      p, shape, strides, [](void*) {}, at::TensorOptions().dtype(dtype).device(device));
}

absl::Status SharedArena::Describe(const at::Tensor& t, v1::HostTensor* out) const {
  PKB_ASSIGN_OR_RETURN(pkb_tensor p, ToPkbTensor(t));
  out->set_segment(id_);
  // An empty tensor has no data pointer (ATen gives null): any offset in the segment will do.
  out->set_offset(
      t.numel() == 0 ? 0 : static_cast<char*>(t.data_ptr()) - static_cast<char*>(segment_.base));
  out->set_dtype(p.dtype);
  for (int i = 0; i < p.ndim; ++i) {
    out->add_shape(p.shape[i]);
    out->add_strides(p.strides[i]);
  }
  return absl::OkStatus();
}

}  // namespace pkb
