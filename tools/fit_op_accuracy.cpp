// fit_op_accuracy: fits the additive accuracy model of the precision search
// (plan/op_accuracy_model.hpp, calibrate/op_accuracy.hpp) on the default model: each unit of
// operators (the embedding; per layer qkv, heads, attn_out, LayerNorms, ffn_in, ffn_out) in each
// of its formats alone, the loss 1 - mean cosine of the embeddings to fp32's on the first --rows
// calibration rows of SST-2's train.tsv (the seeded split, model/data_split.hpp; never dev). Then
// checks the model on --validate held-out random configurations (predicted vs measured loss).
//
//   fit_op_accuracy --out minilm.accuracy.json [--rows 256] [--validate 20]
//
// Exit status: 0 ok, 1 runtime error, 2 usage error.
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <exception>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include <fmt/core.h>

#include "cli.hpp"
#include "stile/calibrate/op_accuracy.hpp"
#include "stile/calibrate/sst2.hpp"
#include "stile/io/encoder_config.hpp"
#include "stile/io/model_cache.hpp"
#include "stile/model/data_split.hpp"

#ifndef STILE_SST2_DIR
#define STILE_SST2_DIR "../shared/data/sst2"
#endif

int main(int argc, char** argv) {
  std::filesystem::path model_dir = stile::default_model_dir(), sst2_dir = STILE_SST2_DIR, out;
  std::size_t rows = 256, validate = 20, threads = 0, seed = 19;
  stile_cli::Parser cli("fit_op_accuracy", "--out FILE [options]",
                        "Fits the per-operator accuracy-loss model of the precision search on SST-2 calibration rows "
                        "and validates it on held-out random configurations.");
  cli.flag("--model", "DIR", "model directory", model_dir);
  cli.flag("--sst2", "DIR", "the SST-2 directory with train.tsv", sst2_dir);
  cli.flag("--rows", "N", "calibration rows used (the split's calibration part, first N)", rows).range(1, 1000);
  cli.flag("--validate", "N", "held-out random configurations to check the model on", validate);
  cli.flag("--seed", "N", "seed of the held-out configurations", seed);
  cli.threads(threads);
  cli.flag("--out", "FILE", "where to write the model", out);
  cli.example("fit_op_accuracy --out minilm.accuracy.json --rows 256 --validate 20");
  if (!cli.parse(argc, argv).empty()) cli.fail("takes no positional arguments");
  if (out.empty()) cli.fail("--out is required");
  try {
    const stile::EncoderConfig c = stile::read_encoder_config((model_dir / "config.json").string());
    const stile::OpGraph g = stile::bert_op_graph(
        {.layers = c.num_layers, .hidden = c.hidden, .heads = c.num_heads, .ffn = c.intermediate, .tokens = 1});
    const stile::LabeledSentences train = stile::read_glue_tsv(sst2_dir / "train.tsv");
    const stile::Sst2Split split;
    const stile::Sst2Parts parts = stile::split_sst2(train.size(), split);
    std::vector<std::string> sentences;
    for (std::size_t i = 0; i < rows; ++i) sentences.push_back(train.sentences[parts.calibration[i]]);
    stile::ThreadPool pool(threads);
    const stile::EmbeddingLossMeter meter(model_dir, g, sentences, pool);
    stile::ProgressBar bar("fit_op_accuracy");
    stile::OpAccuracyModel m = stile::fit_op_accuracy_model(g, std::cref(meter), &bar);
    m.metric = "1 - mean cosine of the sentence embedding to the fp32 model's";
    m.calibration = {{"data", "SST-2 train.tsv, calibration rows of the seeded split (never dev)"},
                     {"rows", rows},
                     {"split_seed", split.seed},
                     {"model", model_dir.filename().string()},
                     {"unit_rule", "a unit (layer's heads, layer's two LayerNorms, or one node) alone in a format, "
                                   "its loss shared equally by its nodes"}};
    std::mt19937_64 rng(seed);
    auto below = [&](std::size_t n) { return static_cast<std::size_t>(rng() % n); };
    std::vector<double> abs_err, pred, meas;
    for (std::size_t i = 0; i < validate; ++i) {
      const std::vector<stile::NumberFormat> f = stile::random_expressible_formats(g, below);
      const double p = m.predict(f), q = meter(f);
      pred.push_back(p), meas.push_back(q), abs_err.push_back(std::abs(p - q));
      fmt::print("held-out {:>2}: predicted loss {:.5f}  measured {:.5f}\n", i + 1, p, q);
    }
    if (validate > 0) {
      std::vector<double> e = abs_err;
      std::sort(e.begin(), e.end());
      double mp = 0, mq = 0;
      for (std::size_t i = 0; i < pred.size(); ++i) mp += pred[i] / double(pred.size()), mq += meas[i] / double(pred.size());
      double sxy = 0, sxx = 0, syy = 0, rel = 0;
      for (std::size_t i = 0; i < pred.size(); ++i) {
        sxy += (pred[i] - mp) * (meas[i] - mq), sxx += (pred[i] - mp) * (pred[i] - mp), syy += (meas[i] - mq) * (meas[i] - mq);
      }
      std::vector<double> rels;
      for (std::size_t i = 0; i < pred.size(); ++i) rels.push_back(meas[i] > 0 ? std::abs(pred[i] - meas[i]) / meas[i] : 0);
      std::sort(rels.begin(), rels.end());
      rel = rels[rels.size() / 2];
      const double r = sxx > 0 && syy > 0 ? sxy / std::sqrt(sxx * syy) : 0;
      fmt::print("held-out: median |predicted - measured| {:.5f} (median relative {:.1f}%), Pearson r {:.3f}, "
                 "mean measured loss {:.5f}\n",
                 e[e.size() / 2], 100 * rel, r, mq);
      m.calibration["held_out"] = {{"configurations", validate},
                                   {"median_abs_error", e[e.size() / 2]},
                                   {"median_relative_error", rel},
                                   {"pearson_r", r}};
    }
    m.save(out);
    fmt::print("wrote {}\n", out.string());
  } catch (const std::exception& e) {
    fmt::print(stderr, "fit_op_accuracy: {}\n", e.what());
    return 1;
  }
  return 0;
}
