#include "report.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "ablate.h"
#include "results.h"
#include "util/file_io.h"

namespace bgh {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

std::string esc(const std::string& s) {
    std::string o;
    for (char c : s) {
        switch (c) {
            case '&': o += "&amp;"; break;
            case '<': o += "&lt;"; break;
            case '>': o += "&gt;"; break;
            case '"': o += "&quot;"; break;
            default: o += c;
        }
    }
    return o;
}

std::string px(double v) {
    char b[32];
    std::snprintf(b, sizeof b, "%.1f", v);
    return b;
}

// The smallest 1, 2 or 5 times a power of ten at or above `v`, so axis ticks are round numbers.
double nice_ceiling(double v) {
    if (v <= 0) return 1;
    const double p = std::pow(10.0, std::floor(std::log10(v)));
    for (double m : {1.0, 2.0, 5.0, 10.0})
        if (m * p >= v) return m * p;
    return 10 * p;
}

}  // namespace

std::string render_ablation_svg(const json& result) {
    const auto rows = ablation_rows(result);
    const json& sc = result["scenario"];
    const double W = 820, left = 190, right = 110, top = 70, bar = 14, gap = 4, row = 2 * bar + gap + 14, bottom = 46;
    const double H = top + row * std::max<size_t>(rows.size(), 1) + bottom;
    const double plot_w = W - left - right;
    double vmax = 0;
    for (const auto& r : rows) vmax = std::max({vmax, r.cold_tok_s.value_or(0), r.warm_tok_s.value_or(0)});
    const double xmax = nice_ceiling(vmax);
    auto x = [&](double v) { return left + plot_w * v / xmax; };
    const char* cold = "#4e79a7";
    const char* warm = "#f28e2b";

    std::ostringstream s;
    s << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << W << "\" height=\"" << px(H) << "\" viewBox=\"0 0 " << W
      << " " << px(H) << "\" font-family=\"sans-serif\" font-size=\"12\">\n";
    s << "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n";
    s << "<text x=\"" << W / 2 << "\" y=\"22\" text-anchor=\"middle\" font-size=\"15\" font-weight=\"bold\">"
      << esc("Prefill speed per configuration: " + sc.value("name", std::string("?")) + " (" +
             sc.value("profile", std::string("?")) + " profile)")
      << "</text>\n";
    s << "<rect x=\"" << left << "\" y=\"36\" width=\"12\" height=\"12\" fill=\"" << cold << "\"/>"
      << "<text x=\"" << left + 18 << "\" y=\"46\">cold (pass 1)</text>\n";
    s << "<rect x=\"" << left + 120 << "\" y=\"36\" width=\"12\" height=\"12\" fill=\"" << warm << "\"/>"
      << "<text x=\"" << left + 138 << "\" y=\"46\">warm (pass " << sc.value("passes", int64_t(1)) << ")</text>\n";
    const double plot_bottom = top + row * rows.size();
    for (int t = 0; t <= 5; ++t) {
        const double v = xmax * t / 5;
        s << "<line x1=\"" << px(x(v)) << "\" y1=\"" << top - 6 << "\" x2=\"" << px(x(v)) << "\" y2=\"" << px(plot_bottom)
          << "\" stroke=\"#ddd\"/>\n";
        s << "<text x=\"" << px(x(v)) << "\" y=\"" << px(plot_bottom + 16) << "\" text-anchor=\"middle\">"
          << esc(fmt_num(v, v < 10 && v != std::floor(v) ? 1 : 0)) << "</text>\n";
    }
    s << "<text x=\"" << px(left + plot_w / 2) << "\" y=\"" << px(plot_bottom + 36)
      << "\" text-anchor=\"middle\">prefill tok/s (median)</text>\n";
    for (size_t i = 0; i < rows.size(); ++i) {
        const auto& r = rows[i];
        const double y = top + row * i;
        s << "<text x=\"" << left - 8 << "\" y=\"" << px(y + bar + gap / 2 + 4) << "\" text-anchor=\"end\">" << esc(r.name)
          << "</text>\n";
        auto draw = [&](const std::optional<double>& v, double yy, const char* color, const std::optional<double>& speedup) {
            if (!v) return;
            s << "<rect x=\"" << left << "\" y=\"" << px(yy) << "\" width=\"" << px(std::max(0.5, x(*v) - left))
              << "\" height=\"" << bar << "\" fill=\"" << color << "\"><title>" << esc(r.name + ": " + fmt_num(*v, 2) + " tok/s")
              << "</title></rect>\n";
            std::string label = fmt_num(*v, 2);
            if (speedup && r.changes.count() > 0) label += " (" + fmt_num(*speedup, 2) + "×)";
            s << "<text x=\"" << px(x(*v) + 4) << "\" y=\"" << px(yy + bar - 3) << "\" font-size=\"11\">" << esc(label)
              << "</text>\n";
        };
        draw(r.cold_tok_s, y, cold, r.cold_speedup);
        draw(r.warm_tok_s, y + bar + gap, warm, r.warm_speedup);
    }
    s << "<line x1=\"" << left << "\" y1=\"" << top - 6 << "\" x2=\"" << left << "\" y2=\"" << px(plot_bottom)
      << "\" stroke=\"#333\"/>\n";
    s << "</svg>\n";
    return s.str();
}

ReportOutcome regenerate_reports(const std::string& dir) {
    ReportOutcome o;
    std::vector<fs::path> files;
    std::error_code ec;
    for (auto it = fs::recursive_directory_iterator(dir, ec); !ec && it != fs::recursive_directory_iterator(); it.increment(ec))
        if (it->is_regular_file() && it->path().extension() == ".json") files.push_back(it->path());
    if (ec) throw std::runtime_error("cannot list " + dir + ": " + ec.message());
    std::sort(files.begin(), files.end());
    for (const auto& f : files) {
        std::ifstream in(f);
        json j;
        try {
            j = json::parse(in);
        } catch (const std::exception& e) {
            o.skipped.push_back(f.string() + ": not JSON");
            continue;
        }
        if (!is_result(j)) {
            o.skipped.push_back(f.string() + ": not a harness result");
            continue;
        }
        const std::string stem = (f.parent_path() / f.stem()).string();
        const bool ablation = j["scenario"].value("mode", "run") == "ablation";
        if (ablation) {
            bg::write_file_atomic(stem + ".svg", render_ablation_svg(j));
            o.written.push_back(stem + ".svg");
        }
        bg::write_file_atomic(stem + ".md", render_markdown(j, ablation ? f.stem().string() + ".svg" : ""));
        o.written.push_back(stem + ".md");
    }
    return o;
}

}  // namespace bgh
