#pragma once
// Entities from a token classifier's per-token scores, as transformers' token-classification
// pipeline makes them (pipelines/token_classification.py: gather_pre_entities, aggregate,
// group_entities, aggregate_overlapping_entities):
//   none     every token its own entity: the label of its highest score
//   simple   tokens labelled as `none` does, then adjacent tokens of one entity type grouped: a
//            token joins the group before it when its type (the label less "B-" / "I-") is the
//            group's and its label does not begin with "B-"; a group's score is its tokens' mean
//   first    words first (a word: a token and the sub-word tokens after it), each labelled by its
//            first token's scores; then grouped as in simple
//   max      each word labelled by the token with the highest single score
//   average  each word labelled by the mean of its tokens' scores
// Entities (or groups) labelled "O" are dropped. Windows of one text (a stride) are aggregated
// each on its own, then overlapping entities are resolved: of two that overlap, the longer (equal
// length: the higher score) stays.
//
// Whether a token continues the word before it is the caller's (model/task_model.hpp says how the
// reference decides it from the tokenizer).
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "stile/core/error.hpp"

namespace stile {

enum class Aggregation : std::uint8_t { kNone, kSimple, kFirst, kMax, kAverage };

inline const char* to_string(Aggregation a) {
  switch (a) {
    case Aggregation::kNone: return "none";
    case Aggregation::kSimple: return "simple";
    case Aggregation::kFirst: return "first";
    case Aggregation::kMax: return "max";
    case Aggregation::kAverage: return "average";
  }
  return "?";
}

inline Aggregation aggregation_from_string(std::string_view name) {
  for (const Aggregation a :
       {Aggregation::kNone, Aggregation::kSimple, Aggregation::kFirst, Aggregation::kMax, Aggregation::kAverage}) {
    if (name == to_string(a)) return a;
  }
  throw Error(concat("stile: aggregation \"", name.substr(0, 40), "\" is not none, simple, first, max or average"));
}

// One token of a window as the aggregation reads it (special tokens are left out before).
struct ScoredToken {
  std::size_t index = 0;           // the token's place in its window
  std::vector<double> scores;      // the softmax over the labels
  std::size_t begin = 0, end = 0;  // bytes of the text
  bool subword = false;            // continues the word of the token before it
};

struct Entity {
  std::string label;  // the label (none) or the entity type (grouped)
  double score = 0.0;
  std::size_t begin = 0, end = 0;  // bytes of the text
  std::size_t index = 0;           // the token's place in its window (none only)
};

namespace token_entities_detail {

inline std::size_t argmax(const std::vector<double>& s) {
  return static_cast<std::size_t>(std::max_element(s.begin(), s.end()) - s.begin());
}

// A label's "B" / "I" and its type: "B-PER" -> (B, PER); a label without the prefix is an "I".
inline std::pair<char, std::string_view> tag(std::string_view label) {
  if (label.starts_with("B-")) return {'B', label.substr(2)};
  if (label.starts_with("I-")) return {'I', label.substr(2)};
  return {'I', label};
}

inline Entity group(std::span<const Entity> run) {
  Entity g;
  const std::string_view label = run.front().label;
  const std::size_t dash = label.find('-');
  g.label = std::string(dash == std::string_view::npos ? label : label.substr(dash + 1));
  double sum = 0.0;
  for (const Entity& e : run) sum += e.score;
  g.score = sum / static_cast<double>(run.size());
  g.begin = run.front().begin;
  g.end = run.back().end;
  return g;
}

}  // namespace token_entities_detail

// The entities of one window's tokens (in order), labelled by `labels`, "O" dropped.
inline std::vector<Entity> window_entities(std::span<const ScoredToken> tokens, std::span<const std::string> labels,
                                           Aggregation aggregation) {
  using namespace token_entities_detail;
  std::vector<Entity> tagged;
  if (aggregation == Aggregation::kNone || aggregation == Aggregation::kSimple) {
    for (const ScoredToken& t : tokens) {
      const std::size_t c = argmax(t.scores);
      tagged.push_back({labels[c], t.scores[c], t.begin, t.end, t.index});
    }
  } else {
    for (std::size_t w = 0; w < tokens.size();) {
      std::size_t e = w + 1;
      while (e < tokens.size() && tokens[e].subword) ++e;
      std::vector<double> scores;
      if (aggregation == Aggregation::kFirst) {
        scores = tokens[w].scores;
      } else if (aggregation == Aggregation::kMax) {
        std::size_t best = w;  // the first token of the highest score (Python's max keeps the first)
        double best_score = tokens[w].scores[argmax(tokens[w].scores)];
        for (std::size_t t = w + 1; t < e; ++t) {
          if (const double s = tokens[t].scores[argmax(tokens[t].scores)]; s > best_score) best = t, best_score = s;
        }
        scores = tokens[best].scores;
      } else {
        scores.assign(tokens[w].scores.size(), 0.0);
        for (std::size_t t = w; t < e; ++t) {
          for (std::size_t c = 0; c < scores.size(); ++c) scores[c] += tokens[t].scores[c];
        }
        for (double& s : scores) s /= static_cast<double>(e - w);
      }
      const std::size_t c = argmax(scores);
      tagged.push_back({labels[c], scores[c], tokens[w].begin, tokens[e - 1].end, tokens[w].index});
      w = e;
    }
  }
  std::vector<Entity> out;
  if (aggregation == Aggregation::kNone) {
    for (Entity& e : tagged) {
      if (e.label != "O") out.push_back(std::move(e));
    }
    return out;
  }
  std::size_t run = 0;
  for (std::size_t i = 1; i <= tagged.size(); ++i) {
    if (i < tagged.size()) {
      const auto [bi, type] = tag(tagged[i].label);
      if (type == tag(tagged[i - 1].label).second && bi != 'B') continue;
    }
    if (i > run) {
      Entity g = group(std::span<const Entity>(tagged).subspan(run, i - run));
      if (g.label != "O") out.push_back(std::move(g));
    }
    run = i;
  }
  return out;
}

// The entities of all windows of one text, overlaps resolved (one window: as they are).
inline std::vector<Entity> merge_window_entities(std::vector<Entity> entities) {
  if (entities.empty()) return entities;
  std::stable_sort(entities.begin(), entities.end(),
                   [](const Entity& a, const Entity& b) { return a.begin < b.begin; });
  std::vector<Entity> out;
  Entity previous = entities.front();
  for (Entity& e : entities) {
    if (previous.begin <= e.begin && e.begin < previous.end) {
      const std::size_t length = e.end - e.begin, previous_length = previous.end - previous.begin;
      if (length > previous_length || (length == previous_length && e.score > previous.score)) previous = e;
    } else {
      out.push_back(std::move(previous));
      previous = e;
    }
  }
  out.push_back(std::move(previous));
  return out;
}

}  // namespace stile
