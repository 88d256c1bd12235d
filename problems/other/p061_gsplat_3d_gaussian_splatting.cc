// Problem 61 — gsplat's distributed rasterization front end (distributed=True, packed=True):
// project every rank's Gaussians into every rank's camera in bf16, keep the visible (camera,
// Gaussian) pairs, and send each camera's pairs to the camera's rank. How many rows a rank
// receives depends on the data.
#include <ATen/CPUGeneratorImpl.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "absl/strings/str_cat.h"
#include "problems/harness/common.h"
#include "problems/harness/registry.h"

namespace pkb {
namespace {

enum : size_t { kMeans, kQuats, kScales, kOpacities, kColors, kViewmats, kKs };  // inputs
enum : int { kCameraIds, kGaussianIds, kRadii, kMeans2d, kDepths, kConics, kOpac, kColor, kRows };

constexpr double kEps2d = 0.3, kNear = 0.01, kFar = 1e10;

struct Sizes {
  int64_t n, width, height;
};

// n = max(1000, min(M, 10000)) Gaussians per rank; Iw = max(64, min(N, 512)),
// Ih = max(64, min(M, 512)).
Sizes SizesOf(const RunConfig& cfg) {
  return {std::max<int64_t>(1000, std::min<int64_t>(cfg.m, 10000)),
          std::max<int64_t>(64, std::min<int64_t>(cfg.n, 512)),
          std::max<int64_t>(64, std::min<int64_t>(cfg.m, 512))};
}

// One rank's projection, packed: the rows of every camera, camera-major, Gaussian-ascending.
struct Packed {
  at::Tensor camera_ids, gaussian_ids;  // int32 (R,)
  at::Tensor radii;                     // int32 (R, 2)
  at::Tensor rows;                      // (R, 10): means2d, depth, conic, opacity, color
  std::vector<int64_t> per_camera;      // rows of each camera
};

at::Tensor Normalize(const at::Tensor& q) {  // F.normalize(q, p=2, dim=-1)
  return q /
         at::clamp_min(at::linalg_vector_norm(q, 2, {-1}, /*keepdim=*/true), 1e-12).expand_as(q);
}

// gsplat's _torch_impl quaternion (w, x, y, z) to rotation matrix, op by op in q's dtype.
at::Tensor RotationOf(const at::Tensor& quats) {
  std::vector<at::Tensor> c = Normalize(quats).unbind(-1);
  const at::Tensor &w = c[0], &x = c[1], &y = c[2], &z = c[3];
  auto one_minus_twice = [](const at::Tensor& t) { return at::rsub(2 * t, 1); };
  at::Tensor r =
      at::stack({one_minus_twice(y.pow(2) + z.pow(2)), 2 * (x * y - w * z), 2 * (x * z + w * y),
                 2 * (x * y + w * z), one_minus_twice(x.pow(2) + z.pow(2)), 2 * (y * z - w * x),
                 2 * (x * z - w * y), 2 * (y * z + w * x), one_minus_twice(x.pow(2) + y.pow(2))},
                -1);
  std::vector<int64_t> shape = quats.sizes().vec();
  shape.back() = 3;
  shape.push_back(3);
  return r.reshape(shape);
}

// Projects n Gaussians into C cameras and packs the visible pairs, as gsplat's torch
// implementation does with torch ops: every op rounds to the inputs' dtype, einsums contract
// left to right, Python's `scalar / tensor` is reciprocal-then-multiply.
Packed ProjectAndPack(const at::Tensor& means, const at::Tensor& quats, const at::Tensor& scales,
                      const at::Tensor& opacities, const at::Tensor& colors,
                      const at::Tensor& viewmats, const at::Tensor& ks, int64_t width,
                      int64_t height) {
  // Sigma = (R diag(s)) (R diag(s))^T.
  at::Tensor mx = RotationOf(quats) * scales.unsqueeze(-2);
  at::Tensor covars = at::einsum("...ij,...kj->...ik", {mx, mx});
  // World to camera: mu_c = R_c mu + t_c, Sigma_c = R_c Sigma R_c^T.
  at::Tensor rot = viewmats.narrow(-2, 0, 3).narrow(-1, 0, 3);
  at::Tensor trans = viewmats.narrow(-2, 0, 3).select(-1, 3);
  at::Tensor means_c = at::einsum("...cij,...nj->...cni", {rot, means}) + trans.unsqueeze(-2);
  at::Tensor covars_c = at::einsum("...cij,...njk,...clk->...cnil", {rot, covars, rot});
  // Perspective projection with the clamped tangent.
  std::vector<at::Tensor> t = means_c.unbind(-1);
  at::Tensor tx = t[0], ty = t[1], tz = t[2];
  at::Tensor tz2 = tz.pow(2);
  auto k_at = [&](int i, int j) { return ks.select(-2, i).select(-1, j).unsqueeze(-1); };
  at::Tensor fx = k_at(0, 0), fy = k_at(1, 1), cx = k_at(0, 2), cy = k_at(1, 2);
  at::Tensor tan_fovx = fx.reciprocal() * (0.5 * width);
  at::Tensor tan_fovy = fy.reciprocal() * (0.5 * height);
  at::Tensor lim_x_pos = at::rsub(cx, width) / fx + 0.3 * tan_fovx;
  at::Tensor lim_x_neg = cx / fx + 0.3 * tan_fovx;
  at::Tensor lim_y_pos = at::rsub(cy, height) / fy + 0.3 * tan_fovy;
  at::Tensor lim_y_neg = cy / fy + 0.3 * tan_fovy;
  at::Tensor txc = tz * at::clamp(tx / tz, -lim_x_neg, lim_x_pos);
  at::Tensor tyc = tz * at::clamp(ty / tz, -lim_y_neg, lim_y_pos);
  at::Tensor o = at::zeros_like(tz);
  std::vector<int64_t> jshape = tz.sizes().vec();
  jshape.insert(jshape.end(), {2, 3});
  at::Tensor jac =
      at::stack({fx / tz, o, -fx * txc / tz2, o, fy / tz, -fy * tyc / tz2}, -1).reshape(jshape);
  at::Tensor cov2d = at::einsum("...ij,...jk,...kl->...il", {jac, covars_c, jac.transpose(-1, -2)});
  at::Tensor means2d =
      at::einsum("...ij,...nj->...ni", {ks.narrow(-2, 0, 2), means_c}) / tz.unsqueeze(-1);
  // Conic and radius.
  cov2d = cov2d + at::eye(2, cov2d.options()) * kEps2d;
  auto c = [&](int i, int j) { return cov2d.select(-2, i).select(-1, j); };
  at::Tensor det = at::clamp(c(0, 0) * c(1, 1) - c(0, 1) * c(1, 0), 1e-10, c10::nullopt);
  at::Tensor conics =
      at::stack({c(1, 1) / det, -(c(0, 1) + c(1, 0)) / 2.0 / det, c(0, 0) / det}, -1);
  at::Tensor depths = means_c.select(-1, 2);
  at::Tensor radius =
      at::stack({at::ceil(3.33 * at::sqrt(c(0, 0))), at::ceil(3.33 * at::sqrt(c(1, 1)))}, -1);
  at::Tensor valid = (depths > kNear).logical_and(depths < kFar);
  radius = radius.masked_fill(valid.logical_not().unsqueeze(-1), 0.0);
  at::Tensor mx2 = means2d.select(-1, 0), my2 = means2d.select(-1, 1);
  at::Tensor rx = radius.select(-1, 0), ry = radius.select(-1, 1);
  at::Tensor inside = (mx2 + rx > 0)
                          .logical_and(mx2 - rx < width)
                          .logical_and(my2 + ry > 0)
                          .logical_and(my2 - ry < height);
  radius = radius.masked_fill(inside.logical_not().unsqueeze(-1), 0.0);
  at::Tensor radii = radius.to(at::kInt);
  // Pack the (camera, Gaussian) pairs whose two radii are positive.
  at::Tensor keep = (radii > 0).all(-1);
  std::vector<at::Tensor> where = at::where(keep);
  Packed p;
  p.camera_ids = where[0].to(at::kInt);
  p.gaussian_ids = where[1].to(at::kInt);
  p.radii = radii.index({keep});
  at::Tensor g = where[1];
  p.rows = at::cat({means2d.index({keep}), depths.index({keep}).unsqueeze(-1), conics.index({keep}),
                    opacities.index_select(0, g).unsqueeze(-1), colors.index_select(0, g)},
                   -1);
  at::Tensor counts = at::bincount(where[0], {}, viewmats.size(0)).to(at::kCPU);
  p.per_camera.assign(counts.data_ptr<int64_t>(), counts.data_ptr<int64_t>() + counts.numel());
  return p;
}

// Camera j's translation in the stronger sets: seeded by rank j's seed through a private CPU
// generator, so that every rank can compute every camera (and PKB's draw order is untouched).
std::vector<double> Translation(uint64_t seed) {
  at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(seed);
  at::Tensor u = at::rand({3}, gen, at::TensorOptions().dtype(at::kDouble));
  at::Tensor t = (u - at::tensor({0.5, 0.5, 0.0}, at::kDouble)) *
                 at::tensor({1.0, 1.0, 0.5}, at::kDouble);  // x, y in [-0.5, 0.5), z in [0, 0.5)
  t = t.to(at::kBFloat16).to(at::kDouble);
  return {t[0].item<double>(), t[1].item<double>(), t[2].item<double>()};
}

class GsplatProjection : public Problem {
 public:
  const ProblemInfo& info() const override;

  absl::Status CanImplement(const RunConfig& cfg) const override {
    return RequirePositiveShape(cfg);
  }

  Inputs MakeInputs(const RunConfig& cfg, int rank, int set) const override;

  // Capacity: each source projects its n Gaussians into rank r's one camera, so at most W n rows.
  std::vector<OutputDecl> Outputs(const RunConfig& cfg, int rank) const override {
    const int64_t cap = cfg.world * SizesOf(cfg).n;
    const at::ScalarType bf = at::kBFloat16;
    return {{"camera_ids", {cap}, at::kLong, kRows},
            {"gaussian_ids", {cap}, at::kLong, kRows},
            {"radii", {cap, 2}, at::kInt, kRows},
            {"means2d", {cap, 2}, bf, kRows},
            {"depths", {cap}, bf, kRows},
            {"conics", {cap, 3}, bf, kRows},
            {"opacities", {cap}, bf, kRows},
            {"colors", {cap, 3}, bf, kRows},
            {"rows", {}, at::kLong}};
  }

  absl::StatusOr<std::vector<at::Tensor>> Reference(Comm& comm, const Inputs& in,
                                                    const RunConfig& cfg) const override;

  absl::StatusOr<std::vector<std::vector<at::Tensor>>> Oracle(const std::vector<Inputs>& all,
                                                              const RunConfig& cfg) const override;

  Tolerance GetTolerance(const RunConfig& cfg, int index) const override;

  // Per rank: W n projections of ~300 flops; the a2a-v moves ~44 B per row (8 + 20 + 16).
  Roofline GetRoofline(const RunConfig& cfg) const override {
    const double n = static_cast<double>(SizesOf(cfg).n), w = cfg.world;
    Roofline r;
    r.nvlink_bytes = 44 * n * (w - 1);
    r.hbm_bytes = n * 2 * (3 + 4 + 3 + 1 + 3) + 44 * w * n * 2;  // read the Gaussians, rows out
    r.flops = 300 * w * n;
    return r;
  }
};

const ProblemInfo& GsplatProjection::info() const {
  static const ProblemInfo i{
      61,
      "61_gsplat_3d_gaussian_splatting",
      1,
      "gsplat distributed rasterization front end (rasterization(distributed=True, packed=True): "
      "projection and the all-to-all of visible Gaussians)",
      "other",
      R"md(Project every rank's 3-D Gaussians into every rank's camera and send each camera's
visible Gaussians to that camera's rank, over WORLD. Any W.

- Sizes: n = max(1000, min(M, 10000)) Gaussians per rank; image Iw = max(64, min(N,
  512)) by Ih = max(64, min(M, 512)).
- Inputs per rank r, all bf16, drawn on the device
  in this order, arithmetic in bf16: `means` (n, 3): column 0 = (rand(n) - 0.5) * sp,
  column 1 = (rand(n) - 0.5) * sp, column 2 = rand(n) * 2 + 2 (sp = 1.5 in set 0);
  `quats` (n, 4) = randn, (w, x, y, z); `scales` (n, 3) = rand * 0.02; `opacities` (n,)
  = rand * 0.8 + 0.1; `colors` (n, 3) = rand; `viewmats` (1, 4, 4) = identity; `Ks`
  (1, 3, 3) = [[f, 0, Iw/2], [0, f, Ih/2], [0, 0, 1]], f = bf16(0.8 min(Iw, Ih)).
  Scalars image_width, image_height, eps2d = 0.3, near_plane = 0.01, far_plane = 1e10
  (camera model: pinhole).
  Set 0 is PKB's: every Gaussian is visible in every (identical) camera. Other sets:
  sp = 3; then rand(n) < 0.125 marks Gaussians moved behind every camera (z = -2);
  rank j's viewmat translates by t_j (x, y in [-0.5, 0.5), z in [0, 0.5), bf16) drawn
  from a CPU generator seeded with rank j's seed; and every Gaussian that lies within
  max(4, 0.03 f) pixels of a visibility edge in some camera (exact arithmetic) is moved
  behind every camera too. So visibility, counts and rows differ per rank, and no
  visibility decision depends on rounding.
- Computation on rank r (gsplat's torch implementation, every op rounded to bf16,
  einsums contracted left to right with fp32 accumulation, as PyTorch computes it):
  (1) all-gather n (int32) and the camera (viewmat then K, 25 bf16): C = W cameras.
  (2) q = quats / max(||quats||, 1e-12); R(q) the standard rotation matrix;
  M = R diag(s); Sigma = M M^T. (3) For each camera c: mu_c = R_c mu + t_c,
  Sigma_c = R_c Sigma R_c^T, depth = mu_c.z; tan = 0.5 Iw / fx (computed as
  (1/fx) * (0.5 Iw)); tx/tz clamped to [-(cx/fx + 0.3 tan_x), (Iw - cx)/fx + 0.3 tan_x],
  ty/tz likewise; J = [[fx/tz, 0, -fx tx/tz^2], [0, fy/tz, -fy ty/tz^2]] with the
  clamped tx, ty; Sigma2 = (J Sigma_c) J^T + 0.3 I; mean2d = (K[:2] mu_c) / tz (not
  clamped); det = max(S00 S11 - S01 S10, 1e-10); conic = (S11/det, -(S01 + S10)/2/det,
  S00/det); radius = (ceil(3.33 sqrt(S00)), ceil(3.33 sqrt(S11))), set to 0 unless
  near < depth < far and mean2d.x + rx > 0, mean2d.x - rx < Iw, mean2d.y + ry > 0,
  mean2d.y - ry < Ih. (4) Keep the (camera, Gaussian) pairs with both radii > 0,
  camera-major, Gaussian-ascending. (5) The pairs of camera j go to rank j
  (all_to_all of the counts, then all_to_all_v of the radii, of the 10 bf16 values
  mean2d, depth, conic, opacity, color, and of the id pair (camera_id - j, gaussian_id +
  j n): the offset uses the DESTINATION j, as gsplat does).
- Outputs on rank r, in order, each with R rows (pairs received; rows from source 0
  first, then by Gaussian index): `camera_ids` int64 (all 0), `gaussian_ids` int64
  (g + r n), `radii` int32 (R, 2), `means2d` bf16 (R, 2), `depths` bf16 (R,), `conics`
  bf16 (R, 3), `opacities` bf16 (R,), `colors` bf16 (R, 3); then `rows` 0-d int64 = R.
  R depends on the data: the candidate writes it to `rows`; every ragged output is
  allocated with W n rows (each source sends at most its n Gaussians per camera), and
  only the first R are compared, after R itself, exactly.
- Tolerance: ids exact; radii within 1 (they are ceilings of bf16 numbers, and an
  fp32 computation crosses an integer now and then); conics 2^-5 absolute and relative, up
  to 5% of them within 0.5 (bf16's det cancels for thin Gaussians); means2d 2 px + 2^-6
  relative (bf16 rounds the translated mean); depths, opacities, colors PKB's 1e-2.
  The set of visible pairs (hence R and the row order) must be exact. Computing in fp32
  or in bf16 gives the same set on these inputs: in set 0 every Gaussian is far inside
  the image, and the other sets keep every Gaussian away from each visibility edge
  (above); a visibility decision that flips with rounding never occurs.
- Host syncs in PKB's reference: the counts; the projection is computed W times over
  (once per camera, all identical in set 0).
- Traffic: about 44 (W-1) n bytes per rank (8 + 20 + 16 per row). FLOPs: about 300 W n.)md"};
  return i;
}

// Splits the packed (R, 10) rows into means2d, depths, conics, opacities, colors.
std::vector<at::Tensor> SplitRows(const at::Tensor& rows) {
  return {rows.narrow(1, 0, 2), rows.select(1, 2), rows.narrow(1, 3, 3), rows.select(1, 6),
          rows.narrow(1, 7, 3)};
}

absl::StatusOr<std::vector<at::Tensor>> GsplatProjection::Reference(Comm& comm, const Inputs& in,
                                                                    const RunConfig& cfg) const {
  const int64_t w = comm.size();
  const Sizes s = SizesOf(cfg);
  const at::Tensor& means = in[kMeans];
  const at::Device dev = means.device();
  // Every rank's Gaussian count (int32) and camera (viewmat then K, 25 numbers).
  std::vector<int64_t> n_world(w, means.size(0));
  at::Tensor viewmats = in[kViewmats], ks = in[kKs];
  if (w > 1) {
    at::Tensor n_mine =
        at::scalar_tensor(means.size(0), at::TensorOptions().dtype(at::kInt).device(dev));
    at::Tensor n_all = at::empty({w}, n_mine.options());
    PKB_RETURN_IF_ERROR(comm.AllGatherInto(n_all, n_mine.reshape({1})));
    at::Tensor n_host = n_all.to(at::kLong).to(at::kCPU);
    n_world.assign(n_host.data_ptr<int64_t>(), n_host.data_ptr<int64_t>() + w);
    at::Tensor cam = at::cat({viewmats.reshape({1, -1}), ks.reshape({1, -1})}, -1);
    at::Tensor cams = at::empty({w, 25}, cam.options());
    PKB_RETURN_IF_ERROR(comm.AllGatherInto(cams, cam));
    viewmats = cams.narrow(1, 0, 16).reshape({w, 4, 4});
    ks = cams.narrow(1, 16, 9).reshape({w, 3, 3});
  }
  Packed p = ProjectAndPack(means, in[kQuats], in[kScales], in[kOpacities], in[kColors], viewmats,
                            ks, s.width, s.height);
  // Camera j's block goes to rank j: its camera id becomes 0 and its Gaussian ids are offset by
  // the Gaussians of the ranks before j (the destination, as gsplat does).
  std::vector<int64_t> cam_offset, gauss_offset;
  for (int64_t j = 0, sum = 0; j < w; sum += n_world[j], ++j) {
    for (int64_t k = 0; k < p.per_camera[j]; ++k) {
      cam_offset.push_back(j);
      gauss_offset.push_back(sum);
    }
  }
  auto longs = at::TensorOptions().dtype(at::kLong);
  at::Tensor ids = at::stack({p.camera_ids - at::tensor(cam_offset, longs).to(dev),
                              p.gaussian_ids + at::tensor(gauss_offset, longs).to(dev)},
                             -1);
  at::Tensor radii = p.radii, rows = p.rows;
  if (w > 1) {
    at::Tensor sent = at::tensor(p.per_camera, longs).to(dev);
    at::Tensor got = at::empty_like(sent);
    PKB_RETURN_IF_ERROR(comm.AllToAllSingle(got, sent, {}, {}));
    at::Tensor got_host = got.to(at::kCPU);
    std::vector<int64_t> out_splits(got_host.data_ptr<int64_t>(), got_host.data_ptr<int64_t>() + w);
    int64_t total = 0;
    for (int64_t k : out_splits) total += k;
    auto exchange = [&](const at::Tensor& x) -> absl::StatusOr<at::Tensor> {
      std::vector<int64_t> shape = x.sizes().vec();
      shape[0] = total;
      at::Tensor y = at::empty(shape, x.options());
      PKB_RETURN_IF_ERROR(comm.AllToAllSingle(y, x.contiguous(), out_splits, p.per_camera));
      return y;
    };
    PKB_ASSIGN_OR_RETURN(radii, exchange(radii));
    PKB_ASSIGN_OR_RETURN(rows, exchange(rows));
    PKB_ASSIGN_OR_RETURN(ids, exchange(ids));
  }
  std::vector<at::Tensor> out = {ids.select(1, 0), ids.select(1, 1), radii};
  for (at::Tensor& t : SplitRows(rows)) out.push_back(t.contiguous());
  out.push_back(at::scalar_tensor(radii.size(0), longs.device(dev)));
  return out;
}

// Each source's projection into all W cameras, as its rank computes it; rank r's rows are the
// camera-r block of every source, in source order.
absl::StatusOr<std::vector<std::vector<at::Tensor>>> GsplatProjection::Oracle(
    const std::vector<Inputs>& all, const RunConfig& cfg) const {
  const int64_t w = static_cast<int64_t>(all.size());
  const Sizes s = SizesOf(cfg);
  std::vector<at::Tensor> views, ks;
  for (const Inputs& in : all) {
    views.push_back(in[kViewmats]);
    ks.push_back(in[kKs]);
  }
  at::Tensor viewmats = at::cat(views), kss = at::cat(ks);
  std::vector<Packed> packed;
  for (const Inputs& in : all) {
    packed.push_back(ProjectAndPack(in[kMeans], in[kQuats], in[kScales], in[kOpacities],
                                    in[kColors], viewmats, kss, s.width, s.height));
  }
  auto longs = at::TensorOptions().dtype(at::kLong);
  std::vector<std::vector<at::Tensor>> res;
  for (int64_t r = 0; r < w; ++r) {
    int64_t offset = 0;
    for (int64_t q = 0; q < r; ++q) offset += all[q][kMeans].size(0);
    std::vector<at::Tensor> gauss, radii, rows;
    for (const Packed& p : packed) {
      at::Tensor mine = p.camera_ids.eq(r).nonzero().reshape({-1});
      gauss.push_back(p.gaussian_ids.index_select(0, mine).to(at::kLong) + offset);
      radii.push_back(p.radii.index_select(0, mine));
      rows.push_back(p.rows.index_select(0, mine));
    }
    at::Tensor g = at::cat(gauss);
    std::vector<at::Tensor> out = {at::zeros_like(g), g, at::cat(radii)};
    for (at::Tensor& t : SplitRows(at::cat(rows))) out.push_back(t.contiguous());
    out.push_back(at::scalar_tensor(g.size(0), longs));
    res.push_back(std::move(out));
  }
  return res;
}

// Whether Gaussian i is behind every camera or lies within `margin` pixels of flipping a
// visibility test in one of `cams` (translations; identity rotation, the shared K). Computed in
// double from the bf16 inputs: a candidate in fp32 and the bf16 reference then agree on which
// pairs are visible although their radii differ by 1 and their means2d by a bf16 ulp.
std::vector<bool> AmbiguousVisibility(const at::Tensor& means, const at::Tensor& quats,
                                      const at::Tensor& scales,
                                      const std::vector<std::vector<double>>& cams, double f,
                                      const Sizes& s, double margin) {
  at::Tensor mu = means.to(at::kCPU, at::kDouble).contiguous();
  at::Tensor q = quats.to(at::kCPU, at::kDouble).contiguous();
  at::Tensor sc = scales.to(at::kCPU, at::kDouble).contiguous();
  auto m = mu.accessor<double, 2>();
  auto qa = q.accessor<double, 2>();
  auto sa = sc.accessor<double, 2>();
  const double cx = s.width * 0.5, cy = s.height * 0.5;
  const double lim_x = cx / f + 0.3 * 0.5 * s.width / f, lim_y = cy / f + 0.3 * 0.5 * s.height / f;
  std::vector<bool> out(m.size(0), false);
  for (int64_t i = 0; i < m.size(0); ++i) {
    double norm = std::sqrt(qa[i][0] * qa[i][0] + qa[i][1] * qa[i][1] + qa[i][2] * qa[i][2] +
                            qa[i][3] * qa[i][3]);
    double w = qa[i][0] / norm, x = qa[i][1] / norm, y = qa[i][2] / norm, z = qa[i][3] / norm;
    double r[3][3] = {{1 - 2 * (y * y + z * z), 2 * (x * y - w * z), 2 * (x * z + w * y)},
                      {2 * (x * y + w * z), 1 - 2 * (x * x + z * z), 2 * (y * z - w * x)},
                      {2 * (x * z - w * y), 2 * (y * z + w * x), 1 - 2 * (x * x + y * y)}};
    double sigma[3][3];
    for (int a = 0; a < 3; ++a) {
      for (int b = 0; b < 3; ++b) {
        sigma[a][b] = 0;
        for (int k = 0; k < 3; ++k) sigma[a][b] += r[a][k] * r[b][k] * sa[i][k] * sa[i][k];
      }
    }
    for (const auto& t : cams) {
      const double px = m[i][0] + t[0], py = m[i][1] + t[1], pz = m[i][2] + t[2];
      if (pz < 1.0) {  // only Gaussians pushed behind every camera are this close
        if (pz > -0.5) out[i] = true;
        continue;
      }
      const double tx = pz * std::clamp(px / pz, -lim_x, lim_x);
      const double ty = pz * std::clamp(py / pz, -lim_y, lim_y);
      const double jac[2][3] = {{f / pz, 0, -f * tx / (pz * pz)}, {0, f / pz, -f * ty / (pz * pz)}};
      double cov[2] = {kEps2d, kEps2d};  // the diagonal of J Sigma J^T + 0.3 I
      for (int a = 0; a < 2; ++a) {
        for (int k = 0; k < 3; ++k) {
          for (int l = 0; l < 3; ++l) cov[a] += jac[a][k] * sigma[k][l] * jac[a][l];
        }
      }
      const double x2d = f * px / pz + cx, y2d = f * py / pz + cy;
      const double rx = 3.33 * std::sqrt(cov[0]), ry = 3.33 * std::sqrt(cov[1]);
      const double edges[] = {x2d + rx, x2d - rx - s.width, y2d + ry, y2d - ry - s.height};
      for (double e : edges) {
        if (std::abs(e) < margin) out[i] = true;
      }
    }
  }
  return out;
}

Inputs GsplatProjection::MakeInputs(const RunConfig& cfg, int rank, int set) const {
  const Sizes s = SizesOf(cfg);
  const int64_t n = s.n;
  auto bf = at::TensorOptions().dtype(at::kBFloat16).device(cfg.device);
  // Set 0 is PKB's field of view, all visible; the other sets spread x and y twice as wide so
  // that image edges cull.
  const double spread = set == 0 ? 1.5 : 3.0;
  at::Tensor means = at::empty({n, 3}, bf);
  means.select(1, 0).copy_((at::rand({n}, bf) - 0.5) * spread);
  means.select(1, 1).copy_((at::rand({n}, bf) - 0.5) * spread);
  means.select(1, 2).copy_(at::rand({n}, bf) * 2.0 + 2.0);
  at::Tensor quats = at::randn({n, 4}, bf);
  at::Tensor scales = at::rand({n, 3}, bf) * 0.02;
  at::Tensor opacities = at::rand({n}, bf) * 0.8 + 0.1;
  at::Tensor colors = at::rand({n, 3}, bf);
  at::Tensor viewmats = at::eye(4, bf).reshape({1, 4, 4});
  at::Tensor ks = at::eye(3, bf).reshape({1, 3, 3});
  const double focal = 0.8 * static_cast<double>(std::min(s.width, s.height));
  ks[0][0][0].fill_(focal);
  ks[0][1][1].fill_(focal);
  ks[0][0][2].fill_(s.width * 0.5);
  ks[0][1][2].fill_(s.height * 0.5);
  if (set > 0 && !cfg.device.is_meta()) {
    // An eighth of the Gaussians behind every camera (depth culling), the cameras translated
    // (edge culling differs per rank), and Gaussians near a visibility edge pushed behind too.
    at::Tensor behind = at::rand({n}, bf) < 0.125;
    std::vector<std::vector<double>> cams;
    for (int j = 0; j < cfg.world; ++j) cams.push_back(Translation(Seed(j, set)));
    for (int a = 0; a < 3; ++a) viewmats[0][a][3].fill_(cams[rank][a]);
    const double f = ks[0][0][0].item<double>();
    std::vector<bool> ambiguous =
        AmbiguousVisibility(means, quats, scales, cams, f, s, std::max(4.0, 0.03 * f));
    at::Tensor push = at::zeros({n}, at::kBool);
    for (int64_t i = 0; i < n; ++i) push[i] = static_cast<bool>(ambiguous[i]);
    push = push.to(cfg.device).logical_or(behind);
    means.select(1, 2).masked_fill_(push, -2.0);
  }
  Inputs in;
  in.Add("means", means);
  in.Add("quats", quats);
  in.Add("scales", scales);
  in.Add("opacities", opacities);
  in.Add("colors", colors);
  in.Add("viewmats", viewmats);
  in.Add("Ks", ks);
  in.scalars.push_back(ScalarArg::Int("image_width", s.width));
  in.scalars.push_back(ScalarArg::Int("image_height", s.height));
  in.scalars.push_back(ScalarArg::Float("eps2d", kEps2d));
  in.scalars.push_back(ScalarArg::Float("near_plane", kNear));
  in.scalars.push_back(ScalarArg::Float("far_plane", kFar));
  return in;
}

Tolerance GsplatProjection::GetTolerance(const RunConfig& cfg, int index) const {
  switch (index) {
    case kCameraIds:
      return {0, 0, true, "Always 0 after the destination's offset: exact."};
    case kGaussianIds:
      return {0, 0, true, "Gaussian index plus the destination's offset: exact."};
    case kRadii:
      return {1, 0, false,
              "Ceilings of bf16 numbers: a candidate computing in fp32 (or in another order) "
              "lands on the other side of an integer now and then, so each radius may differ "
              "by 1. Whether a pair is visible does not follow from this slack: the inputs keep "
              "every Gaussian well away from each visibility edge (see the statement)."};
    case kMeans2d:
      return {2, 1.0 / 64, false,
              "bf16 rounds mu_c (after the camera's translation), K mu_c and the division: an "
              "fp32 implementation differs by up to 2 ulps (4 px near x = 512 at the defaults), "
              "so 2 px + 2^-6 relative; another camera's translation moves a mean by tens of "
              "pixels."};
    case kConics:
      return {1.0 / 32,
              1.0 / 32,
              false,
              "det = S00 S11 - S01 S10 cancels in bf16 for elongated Gaussians, so the bf16 "
              "conic of a thin Gaussian is off by up to 0.27 (measured against fp32 and fp64 "
              "implementations, 4% of the entries beyond 1e-2): 2^-5 absolute and relative, "
              "and up to 5% of the entries may reach 0.5 (a conic entry is at most 1/0.3).",
              0.05,
              0.5,
              0};
    default:
      return {};
  }
}

PKB_REGISTER_PROBLEM(GsplatProjection);

}  // namespace
}  // namespace pkb
