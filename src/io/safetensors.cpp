#include "io/safetensors.h"

#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>

#include <nlohmann/json.hpp>

#include "kernels/fp16.h"
#include "util/error.h"

namespace kvsieve {

std::map<std::string, SafeTensor> read_safetensors(const std::string& path) {
    std::ifstream f(path, std::ios::binary);
    if (!f) fail("cannot open '", path, "'");
    const std::vector<uint8_t> b(std::istreambuf_iterator<char>(f), {});
    require(b.size() >= 8, path, ": truncated safetensors file (", b.size(), " bytes)");
    uint64_t n;
    std::memcpy(&n, b.data(), 8);
    require(n <= b.size() - 8, path, ": truncated safetensors file: header of ", n, " bytes but ", b.size() - 8,
            " left");
    nlohmann::json h;
    try {
        h = nlohmann::json::parse(b.begin() + 8, b.begin() + 8 + static_cast<int64_t>(n));
    } catch (const std::exception& e) { fail(path, ": safetensors header is not valid JSON (", e.what(), ")"); }
    require(h.is_object(), path, ": safetensors header is not a JSON object");
    const uint64_t data_size = b.size() - 8 - n;
    const uint8_t* data = b.data() + 8 + n;
    std::map<std::string, SafeTensor> out;
    for (const auto& [name, t] : h.items()) {
        if (name == "__metadata__") continue;
        try {
            SafeTensor st;
            st.dtype = t.at("dtype").get<std::string>();
            st.shape = t.at("shape").get<std::vector<int64_t>>();
            const auto off = t.at("data_offsets").get<std::vector<uint64_t>>();
            require(off.size() == 2 && off[0] <= off[1], path, ": tensor '", name, "' has bad data_offsets");
            require(off[1] <= data_size, path, ": tensor '", name, "' extends beyond the end of the file (truncated?)");
            size_t es = 0;
            if (st.dtype == "F32")
                es = 4;
            else if (st.dtype == "F16" || st.dtype == "BF16")
                es = 2;
            else
                fail(path, ": tensor '", name, "' has dtype ", st.dtype, " (F32, F16 or BF16 supported)");
            uint64_t count = 1;
            for (int64_t d : st.shape) {
                require(d >= 0, path, ": tensor '", name, "' has a negative dimension");
                count *= static_cast<uint64_t>(d);
            }
            require(count * es == off[1] - off[0], path, ": tensor '", name, "' holds ", off[1] - off[0],
                    " bytes but its shape and dtype need ", count * es);
            st.data.resize(count);
            const uint8_t* p = data + off[0];
            for (uint64_t i = 0; i < count; ++i) {
                if (es == 4) {
                    std::memcpy(&st.data[i], p + 4 * i, 4);
                } else {
                    uint16_t hbits;
                    std::memcpy(&hbits, p + 2 * i, 2);
                    st.data[i] = st.dtype == "F16" ? fp16_to_fp32(hbits) : bf16_to_fp32(hbits);
                }
            }
            out.emplace(name, std::move(st));
        } catch (const nlohmann::json::exception& e) {
            fail(path, ": tensor '", name, "' has a malformed header entry (", e.what(), ")");
        }
    }
    return out;
}

std::string safetensors_file(const std::string& path) {
    return std::filesystem::is_directory(path) ? (std::filesystem::path(path) / "model.safetensors").string() : path;
}

const std::vector<float>& shaped_tensor(const std::map<std::string, SafeTensor>& t, const std::string& name,
                                        const std::vector<int64_t>& shape, const std::string& what) {
    auto it = t.find(name);
    require(it != t.end(), what, ": tensor ", name, " is missing");
    auto text = [](const std::vector<int64_t>& s) {
        std::string o;
        for (int64_t x : s) o += (o.empty() ? "" : ", ") + std::to_string(x);
        return "[" + o + "]";
    };
    require(it->second.shape == shape, what, ": tensor ", name, " has shape ", text(it->second.shape), ", expected ",
            text(shape), " for this model");
    return it->second.data;
}

void write_safetensors(const std::string& path, const std::map<std::string, SafeTensor>& tensors) {
    nlohmann::json h = nlohmann::json::object();
    uint64_t off = 0;
    for (const auto& [name, t] : tensors) {
        uint64_t count = 1;
        for (int64_t d : t.shape) count *= static_cast<uint64_t>(d);
        require(count == t.data.size(), "safetensors: tensor '", name, "' has ", t.data.size(),
                " values for its shape");
        require(t.dtype == "F32" || t.dtype == "F16" || t.dtype.empty(), "safetensors: tensor '", name,
                "': cannot write dtype ", t.dtype, " (F32 or F16)");
        const uint64_t bytes = (t.dtype == "F16" ? 2 : 4) * count;
        h[name] = {
            {"dtype", t.dtype == "F16" ? "F16" : "F32"}, {"shape", t.shape}, {"data_offsets", {off, off + bytes}}};
        off += bytes;
    }
    std::string header = h.dump();
    while ((header.size() + 8) % 8 != 0) header += ' ';  // keep the data 8-byte aligned
    std::ofstream f(path, std::ios::binary);
    if (!f) fail("cannot write '", path, "'");
    const uint64_t n = header.size();
    f.write(reinterpret_cast<const char*>(&n), 8);
    f.write(header.data(), static_cast<std::streamsize>(n));
    for (const auto& [name, t] : tensors) {
        if (t.dtype == "F16") {
            std::vector<uint16_t> half(t.data.size());
            for (size_t i = 0; i < half.size(); ++i) half[i] = fp32_to_fp16(t.data[i]);
            f.write(reinterpret_cast<const char*>(half.data()), static_cast<std::streamsize>(2 * half.size()));
        } else {
            f.write(reinterpret_cast<const char*>(t.data.data()), static_cast<std::streamsize>(4 * t.data.size()));
        }
    }
    if (!f) fail("write error on '", path, "'");
}

}  // namespace kvsieve
