// pkb/aten.h — ATen glue for candidates that use libtorch on the host side, as PKB candidates
// use PyTorch: pkb/aten_core.h and all of ATen (<ATen/ATen.h>, every op). Including it makes
// compiles slower (tens of seconds instead of one); pkb/aten_core.h with the op headers a
// candidate calls takes about half to two thirds of that.
//
//   auto guard = pkb::use_stream(ctx);            // ATen ops now run on ctx->stream
//   at::Tensor a = pkb::as_tensor(in[0]);         // a view, no copy
//   at::Tensor c = pkb::as_tensor(out[0]);
//   at::matmul_out(c, a, pkb::as_tensor(in[1]));
#ifndef PKB_ATEN_H_
#define PKB_ATEN_H_

#include <ATen/ATen.h>

#include "pkb/aten_core.h"

#endif  // PKB_ATEN_H_
