// The problem catalog served to agents: every problem's statement, its source, and, at W = 1, 2,
// 4, 8 and the default shape, the exact signature of each rank, its groups, tolerances and
// roofline.
#include "absl/strings/str_cat.h"
#include "common/eval_spec.h"
#include "pkb/candidate.h"
#include "problems/harness/check.h"
#include "problems/harness/inputs.h"
#include "problems/harness/problem_sources.h"
#include "problems/harness/registry.h"
#include "problems/harness/seed_text.h"
#include "problems/harness/shapes.h"
#include "worker/engine/engine.h"

namespace pkb {
namespace {

v1::TensorDecl Decl(const std::string& name, at::IntArrayRef shape, at::ScalarType t) {
  v1::TensorDecl d;
  d.set_name(name);
  for (auto s : shape) d.add_shape(s);
  d.set_dtype(DtypeName(t));
  return d;
}

}  // namespace

v1::ProblemCatalog BuildCatalog() {
  v1::ProblemCatalog cat;
  // The default shape and dtype are the spec's (common/eval_spec.h), the same for every problem.
  v1::EvalSpec defaults;
  ApplyDefaults(&defaults);
  for (const Problem* p : AllProblems()) {
    v1::ProblemSpec* spec = cat.add_problems();
    const ProblemInfo& info = p->info();
    spec->set_id(info.id);
    spec->set_slug(info.slug);
    spec->set_version(info.version);
    spec->set_origin(info.origin);
    spec->set_category(info.category);
    spec->set_statement(FullStatement(*p));
    spec->set_default_m(defaults.m());
    spec->set_default_n(defaults.n());
    spec->set_default_dtype(defaults.dtype());
    spec->set_candidate_api_version(PKB_API_VERSION);
    for (int w : p->WorldSizes()) spec->add_world_sizes(w);
    for (const EmbeddedSource& src : ProblemSources(info.id)) {
      v1::SourceFile* f = spec->add_sources();
      f->set_path(std::string(src.path));
      f->set_text(std::string(src.text));
    }
    const ShapeLimits limits = LimitsOf(*p);
    spec->set_max_m(limits.max_m);
    spec->set_max_n(limits.max_n);
    spec->set_max_mn(limits.max_mn);
    // The run dtypes the problem accepts at its default shape (at its smallest world size).
    for (at::ScalarType t : {at::kBFloat16, at::kHalf, at::kFloat, at::kDouble}) {
      for (int w : {1, 2, 4, 8}) {
        RunConfig cfg;
        cfg.world = w;
        cfg.dtype = t;
        if (!CheckRunnable(*p, cfg).ok()) continue;
        spec->add_dtypes(DtypeName(t));
        break;
      }
    }
    for (int w : {1, 2, 4, 8}) {
      RunConfig cfg;
      cfg.world = w;
      v1::WorldLayout* layout = spec->add_layouts();
      layout->set_world_size(w);
      absl::Status ok = CheckRunnable(*p, cfg);
      layout->set_supported(ok.ok());
      if (!ok.ok()) {
        layout->set_unsupported_reason(std::string(ok.message()));
        continue;
      }
      // Shapes come from drawing the inputs on the meta device, which allocates nothing.
      cfg.device = at::Device(at::kMeta);
      for (int rank = 0; rank < w; ++rank) {
        v1::RankSignature sig;
        sig.set_rank(rank);
        try {
          Inputs in = p->MakeInputs(cfg, rank, 0);
          for (size_t i = 0; i < in.tensors.size(); ++i) {
            *sig.add_inputs() = Decl(in.names[i], in[i].sizes(), in[i].scalar_type());
          }
          for (const auto& s : in.scalars) {
            v1::ScalarDecl* d = sig.add_scalars();
            d->set_name(s.name);
            d->set_kind(s.is_int ? "int" : "float");
            d->set_value(s.is_int ? static_cast<double>(s.i) : s.f);
            if (s.is_int) {
              d->set_i(s.i);
            } else {
              d->set_f(s.f);
            }
          }
        } catch (const std::exception&) {
          // Problems that cannot draw on the meta device still list their outputs.
        }
        const std::vector<OutputDecl> outs = p->Outputs(cfg, rank);
        for (const auto& o : outs) {
          v1::TensorDecl* d = sig.add_outputs();
          *d = Decl(o.name, o.shape, o.dtype);
          if (o.rows_from >= 0 && static_cast<size_t>(o.rows_from) < outs.size()) {
            d->set_rows_from(outs[o.rows_from].name);
            d->set_note(absl::StrCat("data-dependent length: at most ", o.shape[0],
                                     " rows; write the row count to '", outs[o.rows_from].name,
                                     "'"));
          }
        }
        bool same_as_rank0 =
            rank > 0 && layout->ranks_size() > 0 &&
            sig.SerializeAsString().substr(2) == layout->ranks(0).SerializeAsString().substr(2);
        if (rank == 0 || !same_as_rank0) *layout->add_ranks() = sig;
      }
      for (const auto& g : p->Groups(cfg)) {
        v1::GroupDecl* gd = layout->add_groups();
        gd->set_name(g.name);
        for (const auto& part : g.partition) {
          v1::RankList* rl = gd->add_partition();
          for (int r : part) rl->add_ranks(r);
        }
      }
      const ShapeRange r = p->RankedShapes(w);
      v1::ShapeRange* ranked = layout->mutable_ranked_shapes();
      ranked->set_m_min(r.m_min);
      ranked->set_m_max(r.m_max);
      ranked->set_m_step(r.m_step);
      ranked->set_n_min(r.n_min);
      ranked->set_n_max(r.n_max);
      ranked->set_n_step(r.n_step);
      Roofline roof = p->GetRoofline(cfg);
      layout->set_nvlink_bytes(roof.nvlink_bytes);
      layout->set_hbm_bytes(roof.hbm_bytes);
      layout->set_flops(roof.flops);
      layout->set_busbw_factor(roof.busbw_factor);
      if (w == 8) {
        spec->set_is_collective(roof.collective_bytes > 0);
        spec->set_busbw_factor(roof.busbw_factor);
      }
    }
    RunConfig cfg;
    for (size_t i = 0; i < p->Outputs(cfg, 0).size(); ++i) {
      Tolerance t = p->GetTolerance(cfg, static_cast<int>(i));
      v1::ToleranceDecl* td = spec->add_tolerances();
      td->set_output(p->Outputs(cfg, 0)[i].name);
      td->set_atol(t.atol);
      td->set_rtol(t.rtol);
      td->set_exact(t.exact);
      td->set_rationale(t.rationale);
    }
  }
  return cat;
}

}  // namespace pkb
